// Model interface (the architecture registry is models/registry.h).
//
// A Model runs the transformer stack of one architecture family on packed batches
// (no padding) and returns hidden states; pooling and heads (src/pooling) turn those
// into task outputs. Models are written once against the Backend interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "sluice/sequence.h"
#include "weights/config.h"
#include "weights/safetensors.h"

namespace sluice {

// A packed batch: the tokens of all sequences concatenated.
struct ForwardBatch {
  std::vector<int32_t> token_ids;       // [T]
  std::vector<int32_t> token_type_ids;  // [T] or empty (all zero)
  std::vector<int32_t> cu_seqlens;      // [S + 1], cu_seqlens[0] == 0
  int max_seqlen = 0;
  // Shared-prefix reuse: per sequence, the index of the packed sequence holding its prefix,
  // or -1; empty = no prefixes. A sequence with a prefix holds only its own tokens, whose
  // positions start at the prefix's length, and attends to the prefix's keys/values before
  // its own (see AttentionParams::prefix_of). A prefix sequence is an ordinary sequence
  // without a prefix of its own (its outputs are the caller's to discard). Models that
  // SupportsPrefixReuse() only.
  std::vector<int32_t> prefix_of;
  // Keys not attended (TokenSequence::attended): per sequence, its keys at logical
  // positions >= key_lens[s] are seen by no query (AttentionParams::key_lens); INT32_MAX or
  // the sequence's length = all. Empty = none. Models that SupportsKeyLimits() only.
  std::vector<int32_t> key_lens;
  // Paged KV cache (generation; models that SupportsKvCache()): per sequence, the tokens of
  // it already in the cache (its positions continue from there; its queries see them), and
  // its block table (kv_blocks_per_seq entries, -1 padded); per token, the cache row it is
  // written to. Empty = no cache.
  std::vector<int32_t> kv_start;
  std::vector<int32_t> kv_block_table;
  int kv_blocks_per_seq = 0;
  std::vector<int32_t> kv_slots;
  // Explicit output rows (token indices into the batch), replacing OutputRows' first/last
  // rows when non-empty: generation asks for the rows it samples from.
  std::vector<int32_t> output_rows;

  int num_seqs() const { return cu_seqlens.empty() ? 0 : static_cast<int>(cu_seqlens.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Tokens before sequence s's own: its prefix's length, or 0.
  int PrefixLength(int s) const {
    const int p = prefix_of.empty() ? -1 : prefix_of[s];
    return p < 0 ? 0 : cu_seqlens[p + 1] - cu_seqlens[p];
  }
  void Clear();
  // Appends one sequence (type ids may be empty = zeros), without a prefix; `attended` > 0:
  // only its first `attended` tokens are keys (key_lens).
  void Add(const std::vector<int32_t>& ids, const std::vector<int32_t>& type_ids = {},
           int32_t attended = 0);
  // Appends one engine input (ids, type ids unless !use_types, key limit).
  void Add(const TokenSequence& s, bool use_types = true) {
    Add(s.ids, use_types ? s.type_ids : std::vector<int32_t>{}, s.attended);
  }
  // Appends `n` tokens (type ids zero) as one sequence whose prefix is the packed sequence
  // `prefix` (-1 = none).
  void AddWithPrefix(const int32_t* ids, int n, int prefix);
};

// Scratch device buffers reused across batches. Slot i keeps the largest buffer asked
// for so far; steady-state batches allocate nothing.
class Workspace {
 public:
  explicit Workspace(Backend* backend) : backend_(backend) {}
  Tensor Get(int slot, DType dtype, int64_t rows, int64_t cols);

 private:
  Backend* backend_;
  std::vector<Buffer> buffers_;
  std::vector<int64_t> capacity_;  // bytes
};

// Where a batch's int32 inputs live inside one array, host staging and device alike, so
// that one copy uploads them all. Capacities, not sizes: a CUDA-graph bucket lays out its
// token count whatever the batch holds, and entries past the batch are padding.
struct InputLayout {
  int64_t tokens = 0;          // ids, type ids, positions, KV slots: `tokens` entries each
  int64_t seqs = 0;            // cu_seqlens: seqs + 1 entries; prefix_of, key_lens, kv_start: seqs
  int64_t out_rows = 0;        // output rows (0 = seqs)
  int64_t blocks_per_seq = 0;  // paged KV block table: seqs x blocks_per_seq (0 = no KV)
  int64_t num_rows() const { return out_rows > 0 ? out_rows : seqs; }
  int64_t kv_tokens() const { return blocks_per_seq > 0 ? tokens : 0; }
  int64_t kv_seqs() const { return blocks_per_seq > 0 ? seqs : 0; }
  int64_t ids() const { return 0; }
  int64_t types() const { return tokens; }
  int64_t positions() const { return 2 * tokens; }
  int64_t cu_seqlens() const { return 3 * tokens; }
  int64_t rows() const { return 3 * tokens + seqs + 1; }
  int64_t prefix_of() const { return rows() + num_rows(); }
  int64_t key_lens() const { return prefix_of() + seqs; }
  int64_t kv_start() const { return key_lens() + seqs; }
  int64_t kv_slots() const { return kv_start() + kv_seqs(); }
  int64_t kv_block_table() const { return kv_slots() + kv_tokens(); }
  int64_t size() const { return kv_block_table() + kv_seqs() * blocks_per_seq; }
};

// Which token row of each sequence the head reads (CLS/LAST pooling), if one.
enum class OutputRows { kNone, kFirst, kLast };

// Device-resident batch metadata, uploaded once per forward.
struct DeviceBatch {
  Tensor ids;         // i32 [T]
  Tensor type_ids;    // i32 [T] (zeros when absent)
  Tensor positions;   // i32 [T], 0-based within each sequence
  Tensor cu_seqlens;  // i32 [S + 1]
  int num_seqs = 0;
  int max_seqlen = 0;   // longest packed sequence
  int max_context = 0;  // longest prefix + own tokens (= max_seqlen without prefixes)
  // ForwardBatch::prefix_of: i32 [S] when the batch has prefixes, data == nullptr otherwise.
  Tensor prefix_of;
  // ForwardBatch::key_lens: i32 [S] when the batch has key limits, data == nullptr otherwise.
  Tensor key_lens;
  int64_t num_tokens = 0;
  // Optional: when set (data != nullptr), Forward returns only these token rows
  // ([num_output_rows, hidden], in this order) and may skip the last layer's per-token
  // work (o-proj, MLP, norms) for every other row. Used for CLS/LAST pooling and sampling.
  Tensor output_rows;  // i32 [num_output_rows]
  int num_output_rows = 0;
  // Paged KV cache (ForwardBatch's kv_*): kv_cache holds every layer's K and V cache tensor
  // (2 * layers: K of layer l at 2l, V at 2l + 1); null without a cache.
  const std::vector<Tensor>* kv_cache = nullptr;
  Tensor kv_start;        // i32 [S]
  Tensor kv_slots;        // i32 [T]
  Tensor kv_block_table;  // i32 [S * kv_blocks_per_seq]
  int kv_blocks_per_seq = 0;
  int kv_block_size = 16;
  // The sequence structure (num_seqs, max_seqlen) is the same for every replay of a
  // recording of this forward (AttentionParams::fixed_shape).
  bool fixed_shape = false;
  // The encoder graphs' recordings: cu_seqlens, prefix_of and key_lens hold seq_capacity
  // sequences (the bucket's layout), so attention may be captured with them
  // (AttentionParams::seq_capacity); 0 otherwise.
  int seq_capacity = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  int hidden_size() const { return config_.hidden_size; }
  DType compute_dtype() const { return dtype_; }
  // Longest sequence the model accepts (position embeddings / config limit).
  virtual int max_sequence_length() const { return config_.max_position_embeddings; }
  // Causal models whose Forward accepts ForwardBatch::prefix_of.
  virtual bool SupportsPrefixReuse() const { return false; }
  // Causal LMs whose Forward accepts a paged KV cache (DeviceBatch::kv_cache).
  virtual bool SupportsKvCache() const { return false; }
  // Encoders whose Forward accepts key limits (ForwardBatch::key_lens).
  virtual bool SupportsKeyLimits() const { return false; }
  // The dtype of the residual stream between layers: by default the backend's activation
  // dtype (BERT-family encoders, CLIP); models with ResidualDTypeSelectable() keep it in f32
  // unless ModelLoadOptions::activation_residual asks for the activation dtype.
  virtual DType ResidualDType() const { return backend_->ActivationDType(dtype_); }
  // Whether --residual-dtype (ModelLoadOptions::activation_residual) chooses ResidualDType().
  virtual bool ResidualDTypeSelectable() const { return false; }
  // Per layer, the width of a key/value row in the cache (num_kv_heads * head_dim); 0
  // without KV cache support.
  virtual int64_t kv_dim() const { return 0; }
  int num_layers() const { return config_.num_hidden_layers; }
  // Full-vocabulary logits of final hidden rows ([n, hidden] as Forward returns them) into
  // out ([n, vocab] f32). Models loaded with ModelLoadOptions::lm_head only.
  virtual Status Logits(const Tensor& hidden, Tensor out) {
    (void)hidden;
    (void)out;
    return FailedPrecondition("this model was loaded without a language-model head");
  }

  // Runs the stack; returns packed final hidden states [T, hidden] (f32, or the backend's
  // ActivationDType() for models that keep their hidden states in it), or the rows of
  // batch.output_rows when set, in `ws` (valid until the next Forward on it). Every launch
  // shape depends only on num_tokens and num_output_rows, except attention's (num_seqs,
  // max_seqlen; prefixes through prefix_of), so a backend recording can replay it for another batch
  // of the same token count.
  virtual StatusOr<Tensor> Forward(const DeviceBatch& batch, Workspace& ws) = 0;

  // Writes the batch's inputs into host[0, layout.size()): token ids, type ids (zeros when
  // absent), positions (0-based within each sequence, continuing after a shared prefix,
  // plus any architecture offset), cu_seqlens, and one output row per sequence (its first
  // or last token; zeros for kNone), each sequence's prefix sequence (prefix_of, -1 for
  // none) and key limit (key_lens, INT32_MAX for none). The layout must hold the batch
  // (tokens >= T, seqs >= S). Padding past the batch: ids, types and positions 0,
  // cu_seqlens repeating T, rows 0, prefix_of -1, key_lens INT32_MAX.
  void PackInputs(const ForwardBatch& batch, const InputLayout& layout, OutputRows rows,
                  int32_t* host) const;
  // The DeviceBatch of `batch` over `device` (int32, at least layout.size() elements), which
  // holds (or will hold, stream-ordered) PackInputs' output. output_rows is set unless kNone.
  // prefix_of (key_lens) is bound when the batch has prefixes (key limits), or always with
  // bind_prefix_of (a graph recording, whose attention calls then read each replayed batch's
  // prefixes and key limits).
  DeviceBatch BindInputs(const ForwardBatch& batch, const InputLayout& layout, OutputRows rows,
                         const Tensor& device, bool bind_prefix_of = false) const;

  // Checks a packed batch's structure (non-empty, shared-prefix links). Token ids and
  // lengths are not checked here: sequences are validated once, at admission
  // (engine/admission.h), before they are packed.
  Status CheckBatch(const ForwardBatch& batch) const;

 protected:
  Model(ModelConfig config, Backend* backend, DType dtype)
      : config_(std::move(config)), backend_(backend), dtype_(dtype) {}
  virtual int position_offset() const { return 0; }

  ModelConfig config_;
  Backend* backend_;
  DType dtype_;
};

// A model whose residual stream --residual-dtype chooses (pre-norm decoders, ModernBERT): f32,
// or the activation dtype with ModelLoadOptions::activation_residual.
class SelectableResidualModel : public Model {
 public:
  DType ResidualDType() const override {
    return activation_residual_ ? backend_->ActivationDType(dtype_) : DType::kF32;
  }
  bool ResidualDTypeSelectable() const override { return true; }

 protected:
  SelectableResidualModel(ModelConfig config, Backend* backend, DType dtype,
                          bool activation_residual)
      : Model(std::move(config), backend, dtype), activation_residual_(activation_residual) {}

  bool activation_residual_;
};

}  // namespace sluice
