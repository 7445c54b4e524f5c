// ModelRunner: runs a model's forward passes on a device for the engines (pooling and
// generation). It owns what every forward needs and nothing about what is done with the
// hidden states: the backend, the model, the workspaces, the staging of a batch's inputs
// (one pinned host array, one asynchronous upload) and the CUDA graphs of small batches.
// Output stages (engine/output_stage.h: the pooler for scoring, the sampler for generation)
// take the hidden states it returns.
//
// Not thread-safe: one thread drives a runner.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/graph_buckets.h"
#include "engine/model_bundle.h"

namespace sluice {

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

struct RunnerOptions {
  std::optional<DType> dtype;  // nullopt = "auto": the checkpoint's dtype
  BackendOptions backend;
  bool profile = false;  // time every backend call (synchronising); see ProfileReport()
  // Residual stream of pre-norm decoders in the activation dtype: ModelLoadOptions.
  bool activation_residual = false;
  bool lm_head = false;  // load the full-vocabulary lm_head (generation)
};

// A forward queued by ModelRunner::Run.
struct RunnerForward {
  Tensor hidden;       // final hidden states: the output rows, or every token row
  DeviceBatch device;  // the batch's device inputs (valid until the next Run)
  bool replayed = false;
};

class ModelRunner {
 public:
  static StatusOr<std::unique_ptr<ModelRunner>> Create(std::shared_ptr<const ModelBundle> bundle,
                                                       const RunnerOptions& options);
  ~ModelRunner();

  const ModelBundle& bundle() const { return *bundle_; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  // Scratch for output stages (slots >= 1000; models use small slot numbers).
  Workspace& workspace() { return *workspace_; }
  DType checkpoint_dtype() const { return checkpoint_dtype_; }
  DType compute_dtype() const { return compute_dtype_; }

  // Queues the forward of `batch`: packs its inputs into *staging (grown as needed; keep it
  // unchanged until a fence recorded after this call has passed), uploads them, and runs
  // the model (replaying the CUDA graph of its token-count bucket when one holds it and
  // rows allow: a replay returns every token row). Returns the hidden states, valid until
  // the next Run.
  // With `kv_cache` (the tensors of a KvCache), the batch's kv_* fields place its keys and
  // values in the paged cache (generation).
  StatusOr<RunnerForward> Run(const ForwardBatch& batch, OutputRows rows, HostBuffer* staging,
                              const std::vector<Tensor>* kv_cache = nullptr);

  // CUDA graphs: records the forward of every token-count bucket up to max_tokens
  // (sequences no longer than max_len). Logs what it recorded.
  Status CaptureGraphs(int64_t max_tokens, int max_len);
  void DropGraphs();
  // The recorded token-count buckets (ascending; empty when off) and the number of batches
  // that replayed one since load.
  std::vector<int64_t> graph_buckets() const;
  int64_t graph_batches() const { return graph_batches_; }
  // Attention calls run eagerly between the graph segments of one recorded forward (0 when
  // every attention call is captured, or without graphs).
  int graph_eager_attention_calls() const;

  // Decode graphs (generation, CUDA): the forward of S sequences of one new token each over
  // the paged KV cache `kv_cache` (block tables up to max_model_len), returning one row per
  // sequence, recorded for S in {1, 2, 4, 8} and the token-count ladder up to max_seqs. Run
  // replays the smallest that holds a pure decode batch (padded sequences write their keys
  // to block 0, which the block pool never hands out).
  Status CaptureDecodeGraphs(int max_seqs, int max_model_len, const std::vector<Tensor>* kv_cache);
  std::vector<int64_t> decode_graph_sizes() const;
  int64_t decode_graph_steps() const { return decode_graph_steps_; }

  // Per-op time breakdown since load (markdown table); empty unless options.profile.
  std::string ProfileReport() const;
  void ResetProfile();

 private:
  struct GraphBucket {
    int64_t tokens = 0;
    std::unique_ptr<Recording> recording;
    Tensor hidden;  // [tokens, hidden] final hidden states, in the graph workspace
  };
  ModelRunner() = default;
  const GraphBucket* FindGraph(int64_t tokens) const;

  std::shared_ptr<const ModelBundle> bundle_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Workspace> workspace_;
  DType checkpoint_dtype_ = DType::kF32, compute_dtype_ = DType::kF32;
  // A pure decode batch of `batch` sequences replays the smallest decode graph holding it.
  const GraphBucket* FindDecodeGraph(const ForwardBatch& batch,
                                     const std::vector<Tensor>* kv_cache) const;

  std::vector<GraphBucket> graphs_;             // ascending tokens
  std::unique_ptr<Workspace> graph_workspace_;  // never grows after capture
  Tensor graph_inputs_;                         // int32, the largest bucket's InputLayout
  int64_t graph_batches_ = 0;
  std::vector<GraphBucket> decode_graphs_;  // ascending sequences (tokens == sequences)
  std::unique_ptr<Workspace> decode_workspace_;
  Tensor decode_inputs_;
  int decode_blocks_ = 0;  // block-table width of the decode graphs
  const std::vector<Tensor>* decode_kv_ = nullptr;
  int64_t decode_graph_steps_ = 0;
};

}  // namespace sluice
