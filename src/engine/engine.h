// The offline engine: loads a model directory (config, weights, model, pooling/head)
// on a backend and runs token-id sequences in packed batches under a token budget.
//
// Execution is pipelined: Submit packs a batch's inputs into pinned staging memory, queues
// their upload, the forward, the pooling and the head's device part, and the copy of the
// results back, all asynchronously; Complete waits for the oldest batch's results and runs
// the head's host part. With two batches in flight the host prepares batch k+1 and
// finishes batch k while the device computes (Run does this). On CUDA, batches of up to
// EngineOptions::cuda_graph_max_tokens tokens replay a CUDA graph of the forward recorded
// at load time for their token-count bucket (graph_buckets.h).
//
// Not thread-safe: one thread drives an Engine (the server's engine thread, or the CLI).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/graph_buckets.h"
#include "engine/prefix_groups.h"
#include "pooling/head.h"

namespace sluice {

// Shared-prefix reuse: when consecutive sequences of a packed batch start with the same
// tokens (a causal reranker's prompt template, a query shared by many documents), their
// prefix is computed once per group and each member attends to its keys/values
// (AttentionParams::prefix_of). Groups are chosen to save the most tokens
// (FindPrefixGroups). Applies to causal models with last-token pooling; auto = on for
// CUDA, off for CPU.
enum class PrefixReuse { kAuto, kOn, kOff };

// CUDA graphs: the forward of a batch of at most cuda_graph_max_tokens tokens replays a
// graph recorded at load time for its token-count bucket, which removes most of the kernel
// launch overhead that bounds small batches (attention still launches per layer, with the
// batch's own sequence structure). auto = on for CUDA (off under --profile), off for CPU;
// on is an error where graphs cannot be used.
enum class CudaGraphs { kAuto, kOn, kOff };
// Largest bucket by default: up to 2048 tokens graph replay beat eager launches on an H200
// for the Qwen3-0.6B-shaped reranker (1.2x at 16-256 tokens, 1.02-1.07x at 1536-2048);
// above, padding to the bucket cost as much as the launches saved (0.91-1.03x).
// docs/benchmarks.md, "Execution".
constexpr int64_t kDefaultCudaGraphMaxTokens = 2048;

// Default batch limits per device (EngineOptions 0 = these).
constexpr int64_t kCpuMaxBatchTokens = 8192, kCudaMaxBatchTokens = 65536;
constexpr int kCpuMaxNumSeqs = 256, kCudaMaxNumSeqs = 1024;

struct EngineOptions {
  std::string model_dir;
  std::optional<DType> dtype;  // nullopt = "auto": the checkpoint's dtype
  std::optional<Task> task;    // nullopt = inferred from the architecture
  BackendOptions backend;
  // Batch limits; 0 = the device's default (resolved by Load, see options()): CPU 8192
  // tokens / 256 sequences, CUDA 65536 / 1024 (a GPU needs far larger batches to be busy).
  int64_t max_batch_tokens = 0;
  int max_num_seqs = 0;
  bool profile = false;  // time every backend call (synchronising); see ProfileReport()
  PrefixReuse prefix_reuse = PrefixReuse::kAuto;
  CudaGraphs cuda_graphs = CudaGraphs::kAuto;
  int64_t cuda_graph_max_tokens = kDefaultCudaGraphMaxTokens;  // capped by max_batch_tokens
  // Residual stream of pre-norm decoders in the activation dtype (bf16/f16 on CUDA) instead
  // of f32: ModelLoadOptions::activation_residual.
  bool activation_residual = false;
};

// Counters of shared-prefix reuse since load.
struct PrefixReuseStats {
  int64_t batches = 0;       // batches that ran with at least one shared-prefix group
  int64_t groups = 0;        // groups of sequences that shared a prefix computed once
  int64_t tokens_saved = 0;  // prefix tokens not recomputed: per group (members - 1) x prefix
};

struct SequenceInput {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;  // empty = all zero
};

struct ModelInfo {
  std::string dir;
  std::string architecture;
  std::string family;
  Task task = Task::kEmbed;
  DType checkpoint_dtype = DType::kF32;
  DType compute_dtype = DType::kF32;
  int64_t parameters = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int max_sequence_length = 0;
  std::string head;  // HeadSpec::description
  std::string weights;
  std::string backend;
  std::vector<std::string> st_modules;
};

// Called after each batch with (sequences done, total sequences, tokens done).
using ProgressFn = std::function<void(size_t, size_t, int64_t)>;

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Load(const EngineOptions& options);
  ~Engine();

  const ModelInfo& info() const { return info_; }
  const EngineOptions& options() const { return options_; }
  const HeadSpec& head() const { return head_; }
  bool prefix_reuse() const { return prefix_reuse_; }
  const PrefixReuseStats& prefix_reuse_stats() const { return prefix_stats_; }
  const Model& model() const { return *model_; }
  // Per-op time breakdown since load (markdown table); empty unless options.profile.
  std::string ProfileReport() const;
  void ResetProfile();

  // Runs all inputs, batching by max_batch_tokens / max_num_seqs in input order.
  // Outputs are in input order. A sequence never depends on its batch neighbours.
  StatusOr<std::vector<SequenceOutput>> Run(const std::vector<SequenceInput>& inputs,
                                            const ProgressFn& progress = nullptr);
  // Runs exactly one packed forward over `inputs` (they must fit the budget).
  Status RunBatch(const std::vector<const SequenceInput*>& inputs, SequenceOutput* outputs);
  // Runs one packed forward over a batch the caller already packed and waits for it (and
  // for any batch submitted before it). outputs: one per sequence of `batch`.
  Status RunPacked(const ForwardBatch& batch, SequenceOutput* outputs);

  // Pipelined execution. Submit queues one packed forward (shared-prefix detection, input
  // upload, forward, pooling, head's device part, results copy) and returns without waiting
  // for the device; `batch` may be reused at once, `outputs` (one per sequence) must stay
  // valid until the batch's Complete. Complete waits for the oldest submitted batch and
  // writes its outputs. At most kMaxInFlight batches are submitted and not completed
  // (Submit beyond that: FailedPrecondition). A failed Submit (validation) queues nothing.
  static constexpr int kMaxInFlight = 2;
  Status Submit(const ForwardBatch& batch, SequenceOutput* outputs);
  Status Complete();
  int in_flight() const { return in_flight_; }
  // True when Submit returns before the forward has run (CUDA), so a second batch can be
  // queued behind the first; false when Submit runs the forward itself (CPU).
  bool pipelined() const;
  // Waits for the batches in flight and drops their results (their outputs stay untouched).
  void Abandon();

  // CUDA graphs: the recorded token-count buckets (ascending; empty when off) and the
  // number of batches that replayed one since load.
  std::vector<int64_t> graph_buckets() const;
  int64_t graph_batches() const { return graph_batches_; }

 private:
  // One batch between Submit and Complete: pinned staging for its inputs and results, the
  // fence after its results copy, and what Complete needs to finish it.
  struct Slot {
    HostBuffer inputs;   // int32, InputLayout
    HostBuffer results;  // f32 rows copied back
    std::unique_ptr<Fence> done;
    ForwardBatch prefix_batch;  // the batch as run, when it has shared-prefix groups
    // With groups: the result row of each input sequence (prefix sequences have none).
    std::vector<int> packed_index;
    std::vector<float> gathered;  // those rows, in input order
    SequenceOutput* outputs = nullptr;
    int rows = 0;         // result rows (pooled rows, or tokens for ALL/STEP)
    int width = 0;        // values per result row
    int first_layer = 0;  // head layers already applied on the device
    std::vector<int32_t> cu_seqlens, token_ids;  // ALL/STEP pooling: the batch's layout
  };
  // A recorded forward of one token-count bucket.
  struct GraphBucket {
    int64_t tokens = 0;
    std::unique_ptr<Recording> recording;
    Tensor hidden;  // [tokens, hidden] final hidden states, in the graph workspace
  };

  Engine() = default;
  // CUDA: runs one forward over a full token budget at load time (workspaces, GEMM plans).
  Status WarmUp();
  // CUDA graphs: records the forward of every bucket (options_.cuda_graphs).
  Status CaptureGraphs();
  Status SubmitImpl(const ForwardBatch& batch, SequenceOutput* outputs, bool detect_prefix);
  // Queues the device work of `batch` (as run: prefix already split off) into `slot`.
  Status Enqueue(const ForwardBatch& batch, Slot& slot);
  const GraphBucket* FindGraph(int64_t tokens) const;

  EngineOptions options_;
  ModelInfo info_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Workspace> workspace_;
  HeadSpec head_;
  ForwardBatch batch_;
  std::vector<PrefixGroup> groups_;
  Slot slots_[kMaxInFlight];
  int oldest_ = 0;                              // slot of the oldest batch in flight
  int in_flight_ = 0;                           // batches submitted and not completed
  std::vector<GraphBucket> graphs_;             // ascending tokens
  std::unique_ptr<Workspace> graph_workspace_;  // never grows after capture
  Tensor graph_inputs_;                         // int32, the largest bucket's InputLayout
  int64_t graph_batches_ = 0;
  bool prefix_reuse_ = false;
  // The head's first dense layer (e.g. BERT's pooler) as a device GEMM over the pooled
  // rows; its activation and the rest of the head run on the host.
  std::unique_ptr<LinearWeight> head_dense_;
  PrefixReuseStats prefix_stats_;
};

}  // namespace sluice
