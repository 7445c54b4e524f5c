// The offline engine: loads a model directory (config, weights, model, pooling/head)
// on a backend and runs token-id sequences in packed batches under a token budget.
//
// Not thread-safe: one thread drives an Engine (the server's engine thread, or the CLI).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

struct EngineOptions {
  std::string model_dir;
  std::optional<DType> dtype;  // nullopt = "auto": the checkpoint's dtype
  std::optional<Task> task;    // nullopt = inferred from the architecture
  BackendOptions backend;
  int64_t max_batch_tokens = 8192;
  int max_num_seqs = 256;
  bool profile = false;  // time every backend call (synchronising); see ProfileReport()
  PrefixReuse prefix_reuse = PrefixReuse::kAuto;
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
  // Runs one packed forward over a batch the caller already packed (e.g. on another
  // thread, overlapped with the previous forward). outputs: one per sequence of `batch`.
  Status RunPacked(const ForwardBatch& batch, SequenceOutput* outputs);

 private:
  Engine() = default;
  // CUDA: runs one forward over a full token budget at load time (workspaces, GEMM plans).
  Status WarmUp();
  // One forward of `batch` as packed (no prefix grouping).
  Status RunForward(const ForwardBatch& batch, SequenceOutput* outputs);
  // Pooled rows [S, hidden] (device) -> head -> outputs.
  Status FinishHead(const Tensor& pooled, int S, SequenceOutput* outputs);

  EngineOptions options_;
  ModelInfo info_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Workspace> workspace_;
  HeadSpec head_;
  ForwardBatch batch_, prefix_batch_;
  std::vector<float> host_pooled_;
  std::vector<SequenceOutput> prefix_outputs_;
  std::vector<PrefixGroup> groups_;
  std::vector<int> packed_index_;  // input sequence -> its sequence in prefix_batch_
  bool prefix_reuse_ = false;
  // The head's first dense layer (e.g. BERT's pooler) as a device GEMM over the pooled
  // rows; its activation and the rest of the head run on the host.
  std::unique_ptr<LinearWeight> head_dense_;
  PrefixReuseStats prefix_stats_;
};

}  // namespace sluice
