// The pooling engine: a ModelRunner (engine/model_runner.h) and the Pooler output stage
// (engine/pooler.h) over a model bundle; runs token-id sequences in packed batches under a
// token budget for embedding, classification and scoring.
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

#include "engine/admission.h"
#include "engine/model_runner.h"
#include "engine/pooler.h"
#include "engine/prefix_groups.h"

namespace sluice {

// Shared-prefix reuse: when consecutive sequences of a packed batch start with the same
// tokens (a causal reranker's prompt template, a query shared by many documents), their
// prefix is computed once per group and each member attends to its keys/values
// (AttentionParams::prefix_of). Groups are chosen to save the most tokens
// (FindPrefixGroups). Applies to causal models with last-token pooling; auto = on for
// CUDA, off for CPU.
enum class PrefixReuse { kAuto, kOn, kOff };

// Default batch limits per device (EngineOptions 0 = these).
constexpr int64_t kCpuMaxBatchTokens = 8192, kCudaMaxBatchTokens = 65536;
constexpr int kCpuMaxNumSeqs = 256, kCudaMaxNumSeqs = 1024;

struct EngineOptions {
  std::string model_dir;       // Engine::Load(options) reads the bundle from here
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
  // The linear layers as loaded, by compute dtype and kernel (Backend::DescribeLinearWeights),
  // e.g. "int8 sluice-int8(avx512_vnni) x36, f32 oneDNN-brgemm(avx512_core) x1".
  std::string linear_layers;
  std::vector<std::string> st_modules;
  DType residual_dtype = DType::kF32;  // Model::ResidualDType
  bool residual_selectable = false;    // Model::ResidualDTypeSelectable (--residual-dtype)
};

// Called after each batch with (sequences done, total sequences, tokens done).
using ProgressFn = std::function<void(size_t, size_t, int64_t)>;

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Load(const EngineOptions& options);
  static StatusOr<std::unique_ptr<Engine>> Load(std::shared_ptr<const ModelBundle> bundle,
                                                const EngineOptions& options);
  ~Engine();

  const ModelInfo& info() const { return info_; }
  const EngineOptions& options() const { return options_; }
  const ModelBundle& bundle() const { return runner_->bundle(); }
  const HeadSpec& head() const { return pooler_->head(); }
  bool prefix_reuse() const { return prefix_reuse_; }
  const PrefixReuseStats& prefix_reuse_stats() const { return prefix_stats_; }
  const Model& model() const { return runner_->model(); }
  // What admission checks of every input (engine/admission.h).
  const SequenceLimits& limits() const { return limits_; }
  // Per-op time breakdown since load (markdown table); empty unless options.profile.
  std::string ProfileReport() const;
  void ResetProfile();

  // Validates every input (admission), then runs them all, batching by max_batch_tokens /
  // max_num_seqs in input order. Outputs are in input order. A sequence never depends on
  // its batch neighbours.
  StatusOr<std::vector<PooledOutput>> Run(const std::vector<TokenSequence>& inputs,
                                          const ProgressFn& progress = nullptr);
  // Runs exactly one packed forward over `inputs` (they must fit the budget). RunBatch,
  // RunPacked and Submit take admitted sequences (ValidateSequences with limits()).
  Status RunBatch(const std::vector<const TokenSequence*>& inputs, PooledOutput* outputs);
  // Runs one packed forward over a batch the caller already packed and waits for it (and
  // for any batch submitted before it). outputs: one per sequence of `batch`.
  Status RunPacked(const ForwardBatch& batch, PooledOutput* outputs);

  // Pipelined execution. Submit queues one packed forward (shared-prefix detection, input
  // upload, forward, pooling, head's device part, results copy) and returns without waiting
  // for the device; `batch` may be reused at once, `outputs` (one per sequence) must stay
  // valid until the batch's Complete. Complete waits for the oldest submitted batch and
  // writes its outputs. At most kMaxInFlight batches are submitted and not completed
  // (Submit beyond that: FailedPrecondition). A failed Submit (validation) queues nothing.
  static constexpr int kMaxInFlight = OutputStage::kMaxSlots;
  Status Submit(const ForwardBatch& batch, PooledOutput* outputs);
  Status Complete();
  int in_flight() const { return in_flight_; }
  // True when Submit returns before the forward has run (CUDA), so a second batch can be
  // queued behind the first; false when Submit runs the forward itself (CPU).
  bool pipelined() const;
  // Waits for the batches in flight and drops their results (their outputs stay untouched).
  void Abandon();

  // CUDA graphs: the recorded token-count buckets (ascending; empty when off) and the
  // number of batches that replayed one since load.
  std::vector<int64_t> graph_buckets() const { return runner_->graph_buckets(); }
  int64_t graph_batches() const { return runner_->graph_batches(); }
  int graph_eager_attention_calls() const { return runner_->graph_eager_attention_calls(); }

 private:
  // One batch between Submit and Complete: pinned staging for its inputs, the fence after
  // its results copy, and what Complete needs to finish it (the pooler holds the results).
  struct Slot {
    HostBuffer inputs;  // int32, InputLayout
    std::unique_ptr<Fence> done;
    ForwardBatch prefix_batch;  // the batch as run, when it has shared-prefix groups
    // With groups: the result row of each input sequence (prefix sequences have none).
    std::vector<int> packed_index;
    PooledOutput* outputs = nullptr;
  };

  Engine() = default;
  // CUDA: runs one forward over a full token budget at load time (workspaces, GEMM plans).
  Status WarmUp();
  Status SubmitImpl(const ForwardBatch& batch, PooledOutput* outputs, bool detect_prefix);

  EngineOptions options_;
  ModelInfo info_;
  SequenceLimits limits_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Pooler> pooler_;
  ForwardBatch batch_;
  std::vector<PrefixGroup> groups_;
  Slot slots_[kMaxInFlight];
  int oldest_ = 0;     // slot of the oldest batch in flight
  int in_flight_ = 0;  // batches submitted and not completed
  bool prefix_reuse_ = false;
  PrefixReuseStats prefix_stats_;
};

}  // namespace sluice
