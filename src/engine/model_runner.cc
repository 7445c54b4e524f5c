#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>

#include "backend/profiling_backend.h"
#include "core/log.h"

namespace sluice {

namespace {
// Workspace slot of the packed inputs (models use small numbers, output stages 2000+).
constexpr int kSlotInputs = 1000;
}  // namespace

ModelRunner::~ModelRunner() = default;

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    std::shared_ptr<const ModelBundle> bundle, const RunnerOptions& options) {
  auto r = std::unique_ptr<ModelRunner>(new ModelRunner());
  r->bundle_ = std::move(bundle);
  const ModelBundle& b = *r->bundle_;
  const DType stored = b.weights->DominantDType();
  const DType compute = options.dtype.value_or(stored);
  ASSIGN_OR_RETURN(r->backend_, CreateBackend(options.backend));
  if (options.profile) r->backend_ = std::make_unique<ProfilingBackend>(std::move(r->backend_));
  if (r->backend_->kind() == DeviceKind::kCpu && compute == DType::kF16) {
    return Unsupported(
        "the checkpoint is float16, which the CPU backend does not compute in; "
        "pass --dtype float32 or --dtype bfloat16 (a conversion, logged at load)");
  }
  if (compute == DType::kI8) {
    if (r->backend_->kind() != DeviceKind::kCpu) {
      return Unsupported(
          "--dtype int8 runs on the CPU only (its int8 linear kernels are CPU kernels); use "
          "--device cpu, or --dtype bfloat16/float16 on CUDA");
    }
    if (options.lm_head) {
      return Unsupported(
          "--dtype int8 is for scoring models (embed, classify, score, token-classify); "
          "generation runs in float32 or bfloat16");
    }
    SLUICE_LOG_INFO(
        "dtype int8 (linear layers int8 per-channel, activations quantised per token), from "
        "the checkpoint's {}; attention products in bf16 where the CPU has AMX (the backend "
        "line says), else f32; embeddings, norms and heads in f32",
        DTypeName(stored));
  } else if (compute != stored) {
    SLUICE_LOG_INFO("converting weights from the checkpoint's {} to {} as requested",
                    DTypeName(stored), DTypeName(compute));
  }
  r->checkpoint_dtype_ = stored;
  r->compute_dtype_ = compute;
  ModelLoadOptions mo;
  mo.dtype = compute;
  mo.prefix = b.weight_prefix;
  mo.activation_residual = options.activation_residual;
  mo.lm_head = options.lm_head;
  ASSIGN_OR_RETURN(r->model_, CreateModel(*b.arch, b.config, *b.weights, r->backend_.get(), mo));
  if (compute == DType::kI8) {  // like a conversion, logged (the C API logs only those)
    SLUICE_LOG_INFO("linear layers: {}", r->backend_->DescribeLinearWeights());
  }
  r->workspace_ = std::make_unique<Workspace>(r->backend_.get());
  return r;
}

StatusOr<RunnerForward> ModelRunner::Run(const ForwardBatch& batch, OutputRows rows,
                                         HostBuffer* staging, const std::vector<Tensor>* kv_cache) {
  RETURN_IF_ERROR(model_->CheckBatch(batch));
  if ((kv_cache != nullptr) != !batch.kv_start.empty()) {
    return Internal("a batch with KV cache inputs needs the cache, and only it");
  }
  const int64_t T = batch.num_tokens();
  const int S = batch.num_seqs();
  const bool plain = kv_cache == nullptr && batch.output_rows.empty();
  const GraphBucket* decode = FindDecodeGraph(batch, kv_cache);
  const GraphBucket* graph = plain ? FindGraph(T) : nullptr;
  InputLayout layout{T, S, static_cast<int64_t>(batch.output_rows.size()),
                     static_cast<int64_t>(batch.kv_blocks_per_seq)};
  if (decode) {
    layout = InputLayout{decode->tokens, decode->tokens, decode->tokens, decode_blocks_};
  } else if (graph) {
    layout = InputLayout{graph->tokens, graph->tokens};
  }
  // Inputs: packed on the host into pinned staging, one asynchronous copy.
  const size_t in_bytes = static_cast<size_t>(layout.size()) * sizeof(int32_t);
  if (staging->size() < in_bytes) *staging = backend_->AllocateHost(in_bytes + in_bytes / 4);
  model_->PackInputs(batch, layout, rows, staging->as<int32_t>());
  Tensor dev = decode  ? decode_inputs_
               : graph ? graph_inputs_
                       : workspace_->Get(kSlotInputs, DType::kI32, 1, layout.size());
  dev.cols = layout.size();
  backend_->CopyFromHostAsync(staging->data(), dev);
  RunnerForward f;
  f.device = model_->BindInputs(batch, layout, rows, dev, graph != nullptr);
  f.device.kv_cache = kv_cache;
  if (decode) {
    // The recording holds the whole forward, attention included (fixed shape: padding
    // sequences have no tokens).
    backend_->Replay(*decode->recording, {static_cast<int>(decode->tokens), 1});
    f.hidden = decode->hidden.RowSlice(0, S);  // one output row per sequence, in order
    ++decode_graph_steps_;
    return f;
  }
  if (graph) {
    backend_->Replay(*graph->recording, {S, batch.max_seqlen});
    f.hidden = graph->hidden.RowSlice(0, T);  // the padding rows after T are never read
    f.replayed = true;
    ++graph_batches_;
    return f;
  }
  StatusOr<Tensor> h = model_->Forward(f.device, *workspace_);
  if (!h.ok()) {
    backend_->Synchronize();  // the upload may still read the staging memory
    return h.status();
  }
  f.hidden = *h;
  return f;
}

Status ModelRunner::CaptureGraphs(int64_t max_tokens, int max_len) {
  const std::vector<int64_t> buckets = GraphBuckets(max_tokens);
  if (buckets.empty()) return Status::Ok();
  const int64_t free_before = backend_->DeviceMemoryFree();
  const auto t0 = std::chrono::steady_clock::now();
  graph_workspace_ = std::make_unique<Workspace>(backend_.get());
  const InputLayout top{buckets.back(), buckets.back()};
  graph_inputs_ = graph_workspace_->Get(kSlotInputs, DType::kI32, 1, top.size());
  HostBuffer staging = backend_->AllocateHost(static_cast<size_t>(top.size()) * sizeof(int32_t));
  // Largest bucket first: its warm-up run sizes the graph workspace (and the backend's
  // scratch and tables) once, so smaller buckets record into the same buffers.
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const int64_t n = *it;
    ForwardBatch fb;  // n tokens in sequences no longer than the model allows
    for (int64_t done = 0; done < n;) {
      const int64_t len = std::min<int64_t>(n - done, max_len);
      fb.Add(std::vector<int32_t>(static_cast<size_t>(len), 0));
      done += len;
    }
    const InputLayout layout{n, n};
    model_->PackInputs(fb, layout, OutputRows::kNone, staging.as<int32_t>());
    Tensor dev = graph_inputs_;
    dev.cols = layout.size();
    backend_->CopyFromHostAsync(staging.data(), dev);
    // RoPE tables must cover every position a replay can have: below min(n, max_len).
    DeviceBatch db = model_->BindInputs(fb, layout, OutputRows::kNone, dev, true);
    db.seq_capacity = static_cast<int>(layout.seqs);  // attention may be captured too
    RETURN_IF_ERROR(model_->Forward(db, *graph_workspace_).status());  // warm-up, eager
    backend_->Synchronize();  // `staging` is rewritten for the next bucket
    RETURN_IF_ERROR(backend_->BeginRecording());
    StatusOr<Tensor> hidden = model_->Forward(db, *graph_workspace_);
    StatusOr<std::unique_ptr<Recording>> rec = backend_->EndRecording();
    RETURN_IF_ERROR(
        hidden.status().WithContext("recording the forward of " + std::to_string(n) + " tokens"));
    RETURN_IF_ERROR(
        rec.status().WithContext("recording the forward of " + std::to_string(n) + " tokens"));
    graphs_.push_back({n, std::move(rec).value(), *hidden});
  }
  std::reverse(graphs_.begin(), graphs_.end());
  backend_->Synchronize();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t free_after = backend_->DeviceMemoryFree();
  std::string list;
  for (const auto& g : graphs_) list += (list.empty() ? "" : ", ") + std::to_string(g.tokens);
  SLUICE_LOG_INFO(
      "CUDA graphs: recorded {} token-count buckets ({}) in {:.2f} s, {} MiB of device memory "
      "(graph workspace and graphs); {} graph segments and {} eager attention calls per "
      "forward",
      graphs_.size(), list, secs,
      free_before >= 0 && free_after >= 0 ? (free_before - free_after) >> 20 : 0,
      graphs_.front().recording->graph_segments(), graphs_.front().recording->attention_calls());
  return Status::Ok();
}

const ModelRunner::GraphBucket* ModelRunner::FindDecodeGraph(
    const ForwardBatch& batch, const std::vector<Tensor>* kv_cache) const {
  if (decode_graphs_.empty() || kv_cache != decode_kv_) return nullptr;
  const int S = batch.num_seqs();
  if (batch.num_tokens() != S || batch.output_rows.size() != static_cast<size_t>(S) ||
      batch.kv_blocks_per_seq > decode_blocks_) {
    return nullptr;
  }
  for (int s = 0; s < S; ++s) {
    if (batch.output_rows[s] != s) return nullptr;
  }
  auto it = std::lower_bound(decode_graphs_.begin(), decode_graphs_.end(), S,
                             [](const GraphBucket& g, int64_t n) { return g.tokens < n; });
  return it == decode_graphs_.end() ? nullptr : &*it;
}

Status ModelRunner::CaptureDecodeGraphs(int max_seqs, int max_model_len,
                                        const std::vector<Tensor>* kv_cache) {
  std::vector<int64_t> sizes;
  for (int64_t n : {1, 2, 4, 8}) {
    if (n <= max_seqs) sizes.push_back(n);
  }
  for (int64_t n : GraphBuckets(max_seqs)) {
    if (n > 8) sizes.push_back(n);
  }
  if (sizes.empty()) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t free_before = backend_->DeviceMemoryFree();
  decode_blocks_ = (max_model_len + 15) / 16;
  decode_kv_ = kv_cache;
  decode_workspace_ = std::make_unique<Workspace>(backend_.get());
  const int64_t top = sizes.back();
  const InputLayout top_layout{top, top, top, decode_blocks_};
  decode_inputs_ = decode_workspace_->Get(kSlotInputs, DType::kI32, 1, top_layout.size());
  HostBuffer staging =
      backend_->AllocateHost(static_cast<size_t>(top_layout.size()) * sizeof(int32_t));
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int64_t n = *it;
    // n one-token sequences over block 0 (the padding sink); the first at the last position
    // of max_model_len, so that the RoPE table covers every position a replay can have.
    ForwardBatch fb;
    fb.kv_blocks_per_seq = decode_blocks_;
    for (int64_t s = 0; s < n; ++s) {
      fb.Add({0});
      fb.kv_start.push_back(s == 0 ? max_model_len - 1 : 0);
      fb.kv_slots.push_back(0);
      fb.output_rows.push_back(static_cast<int32_t>(s));
    }
    fb.kv_block_table.assign(static_cast<size_t>(n * decode_blocks_), 0);
    const InputLayout layout{n, n, n, decode_blocks_};
    model_->PackInputs(fb, layout, OutputRows::kNone, staging.as<int32_t>());
    Tensor dev = decode_inputs_;
    dev.cols = layout.size();
    backend_->CopyFromHostAsync(staging.data(), dev);
    DeviceBatch db = model_->BindInputs(fb, layout, OutputRows::kNone, dev, false);
    db.kv_cache = kv_cache;
    db.fixed_shape = true;  // n sequences of one token at every replay: attention is captured
    RETURN_IF_ERROR(model_->Forward(db, *decode_workspace_).status());  // warm-up, eager
    backend_->Synchronize();
    RETURN_IF_ERROR(backend_->BeginRecording());
    StatusOr<Tensor> hidden = model_->Forward(db, *decode_workspace_);
    StatusOr<std::unique_ptr<Recording>> rec = backend_->EndRecording();
    const std::string what = "recording the decode forward of " + std::to_string(n) + " sequences";
    RETURN_IF_ERROR(hidden.status().WithContext(what));
    RETURN_IF_ERROR(rec.status().WithContext(what));
    decode_graphs_.push_back({n, std::move(rec).value(), *hidden});
  }
  std::reverse(decode_graphs_.begin(), decode_graphs_.end());
  backend_->Synchronize();
  const int64_t free_after = backend_->DeviceMemoryFree();
  SLUICE_LOG_INFO("CUDA graphs: recorded {} decode batch sizes (1 .. {}) in {:.2f} s, {} MiB",
                  decode_graphs_.size(), top,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  free_before >= 0 && free_after >= 0 ? (free_before - free_after) >> 20 : 0);
  return Status::Ok();
}

std::vector<int64_t> ModelRunner::decode_graph_sizes() const {
  std::vector<int64_t> out;
  for (const auto& g : decode_graphs_) out.push_back(g.tokens);
  return out;
}

void ModelRunner::DropGraphs() {
  graphs_.clear();
  graph_workspace_.reset();
  decode_graphs_.clear();
  decode_workspace_.reset();
  decode_kv_ = nullptr;
}

int ModelRunner::graph_eager_attention_calls() const {
  return graphs_.empty() ? 0 : graphs_.front().recording->attention_calls();
}

std::vector<int64_t> ModelRunner::graph_buckets() const {
  std::vector<int64_t> out;
  for (const auto& g : graphs_) out.push_back(g.tokens);
  return out;
}

const ModelRunner::GraphBucket* ModelRunner::FindGraph(int64_t tokens) const {
  auto it = std::lower_bound(graphs_.begin(), graphs_.end(), tokens,
                             [](const GraphBucket& g, int64_t t) { return g.tokens < t; });
  return it == graphs_.end() ? nullptr : &*it;
}

std::string ModelRunner::ProfileReport() const {
  auto* p = dynamic_cast<const ProfilingBackend*>(backend_.get());
  return p ? p->Report() : std::string();
}

void ModelRunner::ResetProfile() {
  if (auto* p = dynamic_cast<ProfilingBackend*>(backend_.get())) p->Reset();
}

}  // namespace sluice
