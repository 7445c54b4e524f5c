// The backend interface: everything a model needs from a device. Models are written
// once against this interface; CPU (backend/cpu) and CUDA (backend/cuda) implement it.
//
// Data layout: activations are packed, row-major 2-D matrices [tokens, features] with
// no padding; sequence boundaries travel as cu_seqlens (int32, num_seqs + 1 offsets).
// A Tensor is a non-owning view; `stride` lets a view select a column block of a wider
// matrix (e.g. Q, K and V inside one fused QKV GEMM output).
//
// Threading: a Backend instance is used by one engine thread at a time. Kernels may
// parallelise internally.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "sluice/status.h"

namespace sluice {

enum class DeviceKind { kCpu, kCuda };

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between consecutive rows; 0 means `cols` (dense)

  int64_t row_stride() const { return stride ? stride : cols; }
  bool dense() const { return stride == 0 || stride == cols; }
  int64_t numel() const { return rows * cols; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Rows [r0, r0 + n).
  Tensor RowSlice(int64_t r0, int64_t n) const;
  // Columns [c0, c0 + n) of every row (a strided view).
  Tensor ColSlice(int64_t c0, int64_t n) const;
};

// Device memory owned by a backend; freed when the Buffer is destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<void> mem, Tensor view) : mem_(std::move(mem)), view_(view) {}
  const Tensor& t() const { return view_; }
  bool empty() const { return view_.data == nullptr; }

 private:
  std::shared_ptr<void> mem_;
  Tensor view_;
};

// A host-side tensor as read from a checkpoint (e.g. an mmap'ed safetensors entry).
struct HostTensor {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string name;
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// kQuickGelu: x * sigmoid(1.702 x) (OpenAI CLIP).
enum class Activation { kNone, kGeluErf, kGeluTanh, kSilu, kRelu, kQuickGelu };

// A linear layer's weight, prepared (converted/prepacked) for this backend.
// y = x · W^T + b, W stored as [out_features, in_features] like torch.nn.Linear.
class LinearWeight {
 public:
  virtual ~LinearWeight() = default;
  int64_t out_features = 0;
  int64_t in_features = 0;
  DType dtype = DType::kF32;  // compute dtype of the weight
  bool has_bias = false;
};

// Activations are f32 on every backend; a backend may also accept the dtype its
// ActivationDType() or InnerActivationDType() returns (CUDA: bf16/f16 next to bf16/f16
// weights; CPU: bf16) for x, out and residual (residual in out's dtype).
struct LinearParams {
  const LinearWeight* weight = nullptr;
  Tensor x;                            // [M, in_features]
  Tensor out;                          // [M, out_features]; may alias residual
  Activation act = Activation::kNone;  // applied after bias
  const Tensor* residual = nullptr;    // optional [M, out_features]: out = act(xW^T+b) + residual
};

// A linear layer with the steps that pre-norm decoders run around it, which a backend may
// fuse into the GEMM (CUDA decode batches: one kernel instead of three):
//   in  = norm_weight ? RMSNorm(x) * norm_weight : x          (rounded to the activation dtype)
//   y   = in · W^T + b
//   out = gate != kNone ? gate(y[:, :N/2]) * y[:, N/2:] : y  (W stacks [W_gate; W_up])
//   out += residual (when given; out may alias it)
// A backend that does not fuse runs RmsNorm into `normed` ([M, K], activation dtype), Linear
// into `gate_up` ([M, N], activation dtype) and GatedActivate, as separate operations with
// the same roundings; those scratch tensors are only written then.
struct LinearBlockParams {
  const LinearWeight* weight = nullptr;
  Tensor x;    // [M, K]: the residual stream (norm_weight set) or the GEMM input
  Tensor out;  // [M, N] (or [M, N/2] with a gate)
  const Tensor* residual = nullptr;
  const Tensor* norm_weight = nullptr;  // [1, K] f32, RMSNorm's weight
  float eps = 1e-6f;
  Tensor normed;  // scratch, with norm_weight
  Activation gate = Activation::kNone;
  Tensor gate_up;  // scratch, with a gate
};

enum class RopeStyle { kNeox, kInterleaved };

// RoPE frequency scaling (config.json rope_scaling / rope_parameters), as transformers
// computes it: linear divides every inverse frequency by `factor`; llama3 divides the low
// frequencies by `factor`, keeps the high ones and interpolates in between.
struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position = 0;
  auto key() const {
    return std::make_tuple(static_cast<int>(kind), factor, low_freq_factor, high_freq_factor,
                           original_max_position);
  }
};

struct RopeParams {
  Tensor x;                            // [tokens, num_heads * head_dim], f32, rotated in place
  const int32_t* positions = nullptr;  // [tokens], host memory on CPU, device on CUDA
  int num_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;  // rotated leading dims of each head (== head_dim unless partial)
  double theta = 10000.0;
  RopeStyle style = RopeStyle::kNeox;
  // Optional upper bound on positions (every position < max_position); lets a backend
  // use a cached cos/sin table. 0 = unknown.
  int max_position = 0;
  RopeScaling scaling;
};

// The inverse frequencies of p's rotation (rotary_dim / 2 values), in float32 as
// transformers computes them, scaling included. Every backend uses this one function.
std::vector<float> RopeInverseFrequencies(const RopeParams& p);

// q, k, v and out share one dtype: f32 or the backend's ActivationDType() or
// InnerActivationDType().
struct AttentionParams {
  Tensor q;                             // [tokens, num_heads * head_dim]
  Tensor k;                             // [tokens, num_kv_heads * head_dim]
  Tensor v;                             // [tokens, num_kv_heads * head_dim]
  Tensor out;                           // [tokens, num_heads * head_dim], must not alias q/k/v
  const int32_t* cu_seqlens = nullptr;  // [num_seqs + 1]
  int num_seqs = 0;
  int max_seqlen = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // num_heads % num_kv_heads == 0 (GQA/MQA)
  int head_dim = 0;
  float scale = 0.f;  // softmax scale, usually 1/sqrt(head_dim)
  bool causal = false;
  // Sliding window, 0 = none. Causal: query i sees keys j with i - window < j <= i
  // (Mistral/Qwen convention). Bidirectional: keys with |i - j| < window (ModernBERT's
  // local_attention of w corresponds to window = w / 2 + 1).
  int window = 0;
  // Shared-prefix reuse (causal models): nullptr = none, else [num_seqs] (device memory on
  // CUDA, like cu_seqlens): per sequence, the index of the sequence holding its prefix, or
  // -1. A sequence s with prefix p = prefix_of[s] holds only its own tokens, at logical
  // positions len(p), len(p) + 1, ..., and attends to p's keys/values (logical positions
  // 0 .. len(p) - 1) followed by its own; the result equals running the full sequence
  // (p's tokens + own tokens) on its own. A prefix sequence has no prefix itself.
  const int32_t* prefix_of = nullptr;
  // Keys not attended (ColBERT query expansion): nullptr = none, else [num_seqs] (device
  // memory on CUDA, like cu_seqlens): the queries of sequence s see only its keys at logical
  // positions < key_lens[s] (on top of causal / window); the tokens after them are still
  // queries. A query row with no key left to see gets zeros. Excludes the paged KV cache.
  const int32_t* key_lens = nullptr;
  // Paged KV cache (generation; causal only; excludes prefix_of): k and v are one layer's
  // cache, [num_blocks * kv_block_size, num_kv_heads * head_dim] (row = block * block_size
  // + offset), already holding every key of every sequence, this batch's included
  // (WriteKv first). Sequence s's query rows (cu_seqlens) sit at logical positions
  // kv_start[s], kv_start[s] + 1, ...; its keys at logical positions 0 .. kv_start[s] +
  // len(s) - 1 are rows of the blocks kv_block_table[s * kv_blocks_per_seq + position /
  // kv_block_size]. Device memory on CUDA (host on CPU), like cu_seqlens. max_context: the
  // longest kv_start[s] + len(s).
  const int32_t* kv_block_table = nullptr;
  const int32_t* kv_start = nullptr;
  int kv_blocks_per_seq = 0;
  int kv_block_size = 16;
  int max_context = 0;
  bool paged() const { return kv_block_table != nullptr; }
  // num_seqs and max_seqlen hold for every replay of a recording (decode graphs of one batch
  // size): the call may be captured in the graph instead of running eagerly between graphs.
  bool fixed_shape = false;
  // > 0: cu_seqlens holds seq_capacity + 1 entries, those after the batch's sequences equal
  // to its token count (empty sequences; Model::PackInputs' layout), and key_lens/prefix_of
  // are read for as many. A backend may then run the call from these device arrays alone,
  // without num_seqs and max_seqlen, so a recording can capture it (CUDA: tensor-core
  // attention, the forwards of the encoder graphs). 0: num_seqs entries only.
  int seq_capacity = 0;
  // Precision of the two products (Q K^T and P V) when q/k/v are f32 (the CPU backend's
  // activations): kBF16 rounds q, k, v and the softmax probabilities to bf16 and
  // accumulates in f32, as transformers' bf16 autocast does; scores, softmax and sums stay
  // f32. A backend without a faster bf16 path computes in f32 (CPU: one without AMX, and the
  // paged KV cache of generation everywhere).
  // Ignored where q/k/v already are bf16/f16 (CUDA). kF32 = exact f32.
  DType products = DType::kF32;
};

// WriteKv: this batch's keys and values into the paged cache of one layer.
struct KvWriteParams {
  Tensor k, v;                     // [T, kv_dim] (may be strided views of a fused QKV)
  Tensor k_cache, v_cache;         // [slots, kv_dim], the activation dtype
  const int32_t* slots = nullptr;  // [T] cache row of each token (device memory on CUDA)
};

// Sampling (generation): one row of logits per sequence that picks a token this step.
// Per-row parameters, resolved (defaults applied) by the caller.
struct SamplingRow {
  float temperature = 0.f;  // 0 = greedy (argmax; the lowest id among equal maxima)
  int top_k = 0;            // 0 = all tokens
  float top_p = 1.f;        // 1 = off
  float min_p = 0.f;        // 0 = off
  float repetition_penalty = 1.f;
  uint64_t seed = 0;      // the sequence's random stream (sampling_math.h)
  uint64_t counter = 0;   // the draw's index in it (the output token's position)
  int forced_token = -1;  // >= 0: not sampled, this token is reported (prompt logprobs)
  int num_logprobs = 0;   // top raw logprobs to report (<= SampleParams::max_logprobs)
  // Logit adjustments of this row: SampleParams::adjusts[adjust_begin, adjust_end).
  int adjust_begin = 0, adjust_end = 0;
  // >= 0: the row of SampleParams::masks holding the tokens this row may pick (structured
  // outputs); every other token is masked to -inf after the adjustments.
  int mask_row = -1;
  // allowed_begin >= 0 (and mask_row < 0): the row may pick only the tokens
  // SampleParams::allowed[allowed_begin, allowed_end) (a logits processor's sparse list, ids
  // in [0, vocab), duplicates allowed); every other token is -inf after the adjustments.
  int allowed_begin = -1, allowed_end = -1;
};
// One token's adjustment (distinct tokens within a row): the repetition penalty when
// `repeat` (HF: logit < 0 ? logit * penalty : logit / penalty), then `add` (presence and
// frequency penalties, logit_bias; -inf masks a token).
struct SamplingAdjust {
  int32_t token = 0;
  uint32_t repeat = 0;
  float add = 0.f;
};
constexpr int kMaxLogprobs = 20;
// What comes back per row: the token and its raw logprob (log_softmax of the unadjusted
// logits, as vLLM reports by default), and the row's top raw logprobs when asked.
struct SampledToken {
  int32_t token = 0;
  float logprob = 0.f;
  int32_t num_top = 0;
  int32_t top_ids[kMaxLogprobs];
  float top_logprobs[kMaxLogprobs];
};
struct SampleParams {
  Tensor logits;  // [n, vocab] f32 on the device; used as scratch (overwritten)
  int num_rows = 0;
  // Host memory (pinned staging on CUDA, unchanged until a fence recorded after the call
  // has passed): the rows and their adjustments.
  const SamplingRow* rows = nullptr;
  const SamplingAdjust* adjusts = nullptr;
  int num_adjusts = 0;
  int max_logprobs = 0;         // the largest num_logprobs of any row
  SampledToken* out = nullptr;  // host [n], valid once a fence after the call has passed
  // Token bitmasks (host memory as rows/adjusts): num_masks rows of mask_words words, bit t of
  // word t / 32 set when token t is allowed (tokens past mask_words * 32 are not).
  const uint32_t* masks = nullptr;
  int num_masks = 0;
  int mask_words = 0;
  // Sparse allow-lists (host memory as rows/adjusts): the rows' SamplingRow::allowed_* ranges.
  const int32_t* allowed = nullptr;
  int num_allowed = 0;
};

// The attention inputs of one layer of a decoder with a paged KV cache: q and k rotated
// (RoPE, after a per-head RMSNorm with q_norm / k_norm where given: Qwen3's QK-norm) in place,
// then k and v written to the cache rows `kv.slots` (KvWriteParams). Backends may fuse the
// steps (CUDA: one kernel); the default runs QkNormRope/Rope on q and k, then WriteKv.
struct AttentionInputParams {
  RopeParams q_rope;               // x = q [T, Hq * D], num_heads = Hq
  Tensor k;                        // [T, Hkv * D] (rotated like q, with k_norm)
  const Tensor* q_norm = nullptr;  // [1, D] f32, or null (RoPE only)
  const Tensor* k_norm = nullptr;
  float eps = 1e-6f;
  int num_kv_heads = 0;
  KvWriteParams kv;  // k, v and the cache (kv.k must be `k`)
};

// Copies whole KV blocks (every layer's K and V) from src[i] to dst[i] (a sequence forked
// from another shares its full blocks and gets a copy of the partial last one).
struct KvCopyParams {
  const std::vector<Tensor>* caches = nullptr;  // every layer's K and V cache tensor
  const int32_t* src = nullptr;                 // host [n] block indices
  const int32_t* dst = nullptr;
  int num_blocks = 0;
  int block_size = 16;
};

enum class PoolMode { kCls, kMean, kLast, kMax };

struct PoolParams {
  Tensor hidden;  // [tokens, H] f32
  Tensor out;     // [num_seqs, H] f32
  const int32_t* cu_seqlens = nullptr;
  int num_seqs = 0;
  PoolMode mode = PoolMode::kCls;
};

// Host memory for staging copies between host and device: page-locked on CUDA, so that
// CopyFromHostAsync/CopyToHostF32Async from/into it are truly asynchronous; plain memory
// elsewhere. Freed when the last copy of the HostBuffer is destroyed (the owner must make
// sure no queued copy still uses it: wait on a Fence recorded after the copy first).
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(std::shared_ptr<void> mem, size_t bytes) : mem_(std::move(mem)), bytes_(bytes) {}
  void* data() const { return mem_.get(); }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(mem_.get());
  }

 private:
  std::shared_ptr<void> mem_;
  size_t bytes_ = 0;
};

// A point in a backend's queue of device work. Record() marks everything queued so far;
// Wait() blocks until all of it has finished (copies included). Recording again moves the
// point. A fence never recorded is complete.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual void Record() = 0;
  virtual void Wait() = 0;
  // Whether the work before the last Record has finished, without waiting (a backend that runs
  // its work synchronously: always).
  virtual bool Done() { return true; }
};

// Device work recorded once and replayed many times with the same shapes and pointers (CUDA
// graphs). See Backend::BeginRecording.
class Recording {
 public:
  virtual ~Recording() = default;
  virtual int graph_segments() const = 0;   // captured graphs
  virtual int attention_calls() const = 0;  // attention calls run between them
};

// What a replay changes in every recorded attention call: the batch's sequence structure.
// (The cu_seqlens, prefix_of and key_lens pointers are the recorded ones: write the new
// offsets, prefixes and key limits there before replaying; record with a prefix_of array,
// all -1 when none, and a key_lens array, all INT32_MAX when none.)
struct ReplayShape {
  int num_seqs = 0;
  int max_seqlen = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string Describe() const = 0;  // e.g. "cpu (2 threads, avx512_bf16)"
  // The linear weights prepared so far, by compute dtype and kernel, e.g. "int8
  // sluice-int8(avx512_vnni) x36, f32 oneDNN-brgemm(avx512_core) x1"; empty if not tracked.
  virtual std::string DescribeLinearWeights() const { return ""; }

  // The dtype in which models should keep per-token intermediate activations (GEMM
  // inputs/outputs, attention q/k/v/out) when linear weights are in `weight_dtype`. The
  // residual stream stays f32. CPU: always f32. CUDA: bf16/f16 next to bf16/f16 weights.
  virtual DType ActivationDType(DType weight_dtype) const {
    (void)weight_dtype;
    return DType::kF32;
  }
  // The dtype of the activations that only flow from one linear layer or attention into
  // another (a fused QKV, the attention output, an encoder MLP's intermediate) when linear
  // weights are in `weight_dtype`; the residual stream and the norms stay in
  // ActivationDType(). Default: ActivationDType(). CPU: bf16 next to bf16 weights, as
  // transformers' bf16 autocast keeps them, and next to int8 weights
  // (SLUICE_CPU_ACTIVATIONS=f32 keeps f32).
  virtual DType InnerActivationDType(DType weight_dtype) const {
    return ActivationDType(weight_dtype);
  }

  // Memory. Allocated buffers are uninitialised.
  virtual Buffer Allocate(DType dtype, int64_t rows, int64_t cols) = 0;
  // Copies/converts a host tensor (checkpoint dtype) to a device buffer of `dtype`.
  // The shape is flattened to [shape[0], prod(rest)] (1-D tensors become [1, n]).
  virtual StatusOr<Buffer> Upload(const HostTensor& src, DType dtype) = 0;
  // Copies host memory into a device tensor of the same dtype and size.
  virtual void CopyFromHost(const void* src, const Tensor& dst) = 0;
  // Copies a (possibly strided) device tensor to dense host memory, converting to f32.
  virtual void CopyToHostF32(const Tensor& src, float* dst) = 0;

  // Linear layers. bias may be null. `dtype` is the compute dtype of the weight.
  virtual StatusOr<std::unique_ptr<LinearWeight>> PrepareLinear(const HostTensor& weight,
                                                                const HostTensor* bias,
                                                                DType dtype) = 0;
  virtual void Linear(const LinearParams& p) = 0;

  // out[i, :] (+)= table[ids[i], :]. table is [vocab, H] (f32 or bf16/f16); out f32.
  virtual void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, Tensor out,
                               bool accumulate) = 0;
  // out = LayerNorm(x + residual) * gamma + beta over the last dim. residual may be null;
  // out may alias x or residual. beta may be null (no bias).
  virtual void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma,
                         const Tensor* beta, float eps, Tensor out) = 0;
  // Pre-norm residual stream: if delta != null, residual += delta; then
  // out = RMSNorm(residual) * weight. `group` > 0 normalises each consecutive group of
  // `group` columns separately (per-head QK-norm, weight has `group` entries).
  // out may alias residual (only when delta == null).
  virtual void RmsNorm(Tensor residual, const Tensor* delta, const Tensor& weight, float eps,
                       Tensor out, int group = 0) = 0;
  virtual void Rope(const RopeParams& p) = 0;
  // Per-head RMSNorm (weight [1, head_dim]) of p.x, in place, then RoPE: what Qwen3's
  // QK-norm followed by rotary embedding computes. Backends may fuse the two.
  virtual void QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps) {
    RmsNorm(p.x, nullptr, norm_weight, eps, p.x, p.head_dim);
    Rope(p);
  }
  virtual void Attention(const AttentionParams& p) = 0;
  virtual void WriteKv(const KvWriteParams& p) = 0;
  // See AttentionInputParams / LinearBlockParams; the defaults run the unfused operations.
  virtual void AttentionInputs(const AttentionInputParams& p);
  virtual void LinearBlock(const LinearBlockParams& p);
  virtual void CopyKvBlocks(const KvCopyParams& p) = 0;
  // Picks one token per row (and its logprobs) on the device; see SampleParams.
  virtual void Sample(const SampleParams& p) = 0;
  // Starts copying the masks and allow-lists of the next Sample (p's host pointers and sizes;
  // the rest of p is ignored) to the device now, beside the work already queued, so that the
  // Sample after the forward does not wait for them. The next Sample whose masks and
  // allow-lists are these exact pointers and sizes uses the copies; the host memory must stay
  // unchanged until a fence recorded after that Sample has passed. Default: nothing (Sample
  // copies them itself).
  virtual void StageSampleInputs(const SampleParams& p) { (void)p; }
  // In-place element-wise activation.
  virtual void Activate(Tensor x, Activation act) = 0;
  // Gated activation: gate_up [T, 2I] holds gate in cols [0, I) and up in [I, 2I);
  // out [T, I] = act(gate) * up. (SwiGLU: kSilu; GeGLU: kGeluErf/kGeluTanh.)
  virtual void GatedActivate(const Tensor& gate_up, Activation act, Tensor out) = 0;
  // out = a + b (element-wise; out may alias a or b).
  virtual void Add(const Tensor& a, const Tensor& b, Tensor out) = 0;
  // out[i, :] = x[rows[i], :]
  virtual void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) = 0;
  virtual void Pool(const PoolParams& p) = 0;

  // Blocks until queued device work is done (no-op on CPU).
  virtual void Synchronize() = 0;

  // ---- Asynchronous execution. The defaults are synchronous and correct (CPU). ----

  // True when operations are queued and run after the call returns (CUDA); false when
  // every call has finished its work on return (CPU: a forward runs inside the call).
  virtual bool asynchronous() const { return false; }

  // Host staging memory (pinned on CUDA) of at least `bytes`, for the copies below.
  virtual HostBuffer AllocateHost(size_t bytes);
  // Queues a copy of host memory into a device tensor of the same dtype and size. Unlike
  // CopyFromHost, `src` may be read when the copy runs: keep it unchanged until a fence
  // recorded after this call has been waited on. Asynchronous from AllocateHost memory.
  virtual void CopyFromHostAsync(const void* src, const Tensor& dst) { CopyFromHost(src, dst); }
  // Queues a copy of a (possibly strided) device tensor into dense host f32 memory; `dst`
  // holds the values once a fence recorded after this call has been waited on.
  // Asynchronous into AllocateHost memory.
  virtual void CopyToHostF32Async(const Tensor& src, float* dst) { CopyToHostF32(src, dst); }
  // A fence on this backend's queue (default: Wait() synchronises the backend).
  virtual std::unique_ptr<Fence> CreateFence();
  // Free device memory in bytes, or -1 where the backend does not know (CPU).
  virtual int64_t DeviceMemoryFree() { return -1; }
  // Total device memory in bytes, or -1 where the backend does not know (CPU).
  virtual int64_t DeviceMemoryTotal() { return -1; }

  // ---- Recorded forwards (CUDA graphs). ----
  //
  // Between BeginRecording and EndRecording the backend records the operations it is given
  // instead of running them; Replay runs them again with the same shapes and the same
  // pointers (fixed workspaces, inputs written to the same device buffers). Attention calls
  // are not captured: each splits the recording into graph segments and runs eagerly on
  // replay, with num_seqs / max_seqlen from the ReplayShape (so one recording serves any
  // sequence structure of its token count, shared prefixes included). Everything else
  // recorded must have launch shapes that do not depend on those values.
  // Operations that must not run while recording (allocation growth, host copies,
  // Synchronize) abort. The caller keeps the buffers it passed (workspaces, inputs) alive
  // and unmoved while it replays; the backend keeps its own internal buffers that a
  // recording may reference (GEMM scratch, RoPE tables) alive until it is destroyed.
  // Default: Unsupported (CPU).
  virtual Status BeginRecording();
  virtual StatusOr<std::unique_ptr<Recording>> EndRecording();
  virtual void Replay(const Recording& recording, const ReplayShape& shape);
};

struct BackendOptions {
  DeviceKind device = DeviceKind::kCpu;
  int device_index = 0;
  int num_threads = 0;      // CPU: 0 = all cores available to the process
  bool allow_tf32 = false;  // CUDA: fp32 GEMMs may use TF32 tensor cores (less precise)
  // CUDA: every row's result is independent of the batch around it (generation: the same
  // tokens alone, in any batch, under any chunking and after preemption). One cuBLASLt
  // algorithm per GEMM shape whatever the number of rows (no split-K), no GEMV kernel or
  // fused decode blocks, and decode attention through the prefill kernel, whose per-row
  // arithmetic does not depend on the other rows. Slower; the CPU backend is batch
  // invariant without it.
  bool batch_invariant = false;
  // CPU: the model mostly runs few-row GEMMs (generation: decode steps of a few sequences).
  // bf16 weights then take sluice's AVX-512 kernel (bf16 widened in registers, f32 FMA) even
  // where oneDNN has an AMX kernel: at 1-4 rows it streams the weights ~1.2-2x faster, while
  // AMX is 2-4x faster from ~64 rows (docs/benchmarks.md, "CPU linear paths on AMX").
  // SLUICE_CPU_LINEAR overrides it. Set by the generation engine.
  bool cpu_few_rows = false;
};

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

}  // namespace sluice
