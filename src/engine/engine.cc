#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "backend/profiling_backend.h"
#include "core/log.h"

namespace sluice {

Engine::~Engine() {
  // Queued copies may still target the slots' pinned memory.
  if (backend_) Abandon();
}

namespace {

// Finds the weight-name prefix of the base model by probing its embedding table.
StatusOr<std::string> DetectPrefix(const ArchitectureInfo& arch, const WeightStore& w) {
  const std::string probe =
      arch.family == "qwen3" ? "embed_tokens.weight" : "embeddings.word_embeddings.weight";
  for (const std::string& p : {arch.prefix, std::string(""), std::string("model."),
                               std::string("bert."), std::string("roberta.")}) {
    if (w.Has(p + probe)) return p;
  }
  return NotFound("cannot find the base model weights (looked for " + arch.prefix + probe +
                  ") in " + w.description());
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& options) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->options_ = options;
  if (options.max_batch_tokens < 0 || options.max_num_seqs < 0) {
    return InvalidArgument("max_batch_tokens and max_num_seqs must be positive (0 = default)");
  }
  {
    const bool gpu = options.backend.device == DeviceKind::kCuda;
    EngineOptions& o = e->options_;
    if (o.max_batch_tokens == 0)
      o.max_batch_tokens = gpu ? kCudaMaxBatchTokens : kCpuMaxBatchTokens;
    if (o.max_num_seqs == 0) o.max_num_seqs = gpu ? kCudaMaxNumSeqs : kCpuMaxNumSeqs;
  }
  if (options.cuda_graphs == CudaGraphs::kOn) {
    if (options.backend.device != DeviceKind::kCuda) {
      return InvalidArgument("CUDA graphs (--cuda-graphs on) need a CUDA device");
    }
    if (options.profile) {
      return InvalidArgument("CUDA graphs (--cuda-graphs on) and --profile exclude each other");
    }
  }
  if (options.cuda_graph_max_tokens < 0) {
    return InvalidArgument("cuda_graph_max_tokens must be >= 0");
  }
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(options.model_dir));
  ASSIGN_OR_RETURN(ArchitectureInfo arch, LookupArchitecture(config));
  ASSIGN_OR_RETURN(SentenceTransformersConfig st,
                   LoadSentenceTransformersConfig(options.model_dir));
  ASSIGN_OR_RETURN(SluiceOverrides overrides, LoadSluiceOverrides(options.model_dir));
  ASSIGN_OR_RETURN(WeightStore store, WeightStore::OpenDirectory(options.model_dir));
  e->weights_ = std::make_unique<WeightStore>(std::move(store));
  const WeightStore& w = *e->weights_;

  const DType stored = w.DominantDType();
  DType compute = options.dtype.value_or(stored);
  ASSIGN_OR_RETURN(e->backend_, CreateBackend(options.backend));
  if (options.profile) e->backend_ = std::make_unique<ProfilingBackend>(std::move(e->backend_));
  if (e->backend_->kind() == DeviceKind::kCpu && compute == DType::kF16) {
    return Unsupported(
        "the checkpoint is float16, which the CPU backend does not compute in; "
        "pass --dtype float32 or --dtype bfloat16 (a conversion, logged at load)");
  }
  if (compute != stored) {
    SLUICE_LOG_INFO("converting weights from the checkpoint's {} to {} as requested",
                    DTypeName(stored), DTypeName(compute));
  }
  ASSIGN_OR_RETURN(std::string prefix, DetectPrefix(arch, w));
  ModelLoadOptions mo;
  mo.dtype = compute;
  mo.prefix = prefix;
  mo.activation_residual = options.activation_residual;
  ASSIGN_OR_RETURN(e->model_, CreateModel(arch, config, w, e->backend_.get(), mo));

  HeadResolveInput hi;
  hi.arch = &arch;
  hi.config = &config;
  hi.st = &st;
  hi.overrides = &overrides;
  hi.weights = &w;
  hi.task = options.task;
  ArchitectureInfo head_arch = arch;
  head_arch.prefix = prefix;
  hi.arch = &head_arch;
  ASSIGN_OR_RETURN(e->head_, ResolveHead(hi));
  e->workspace_ = std::make_unique<Workspace>(e->backend_.get());
  if (!e->head_.layers.empty() && e->head_.pooling != PoolingKind::kAll &&
      e->head_.pooling != PoolingKind::kStep) {
    const HostLinear& l = e->head_.layers[0];
    {  // on the host this product was the slowest part of a BERT cross-encoder on CUDA
      HostTensor hw{l.weight.data(), DType::kF32, {l.out, l.in}, "head " + l.name};
      HostTensor hb{l.bias.data(), DType::kF32, {l.out}, "head " + l.name + " bias"};
      ASSIGN_OR_RETURN(e->head_dense_,
                       e->backend_->PrepareLinear(hw, l.bias.empty() ? nullptr : &hb, DType::kF32));
    }
  }

  ModelInfo& info = e->info_;
  info.dir = options.model_dir;
  info.architecture = arch.name;
  info.family = arch.family;
  info.task = e->head_.task;
  info.checkpoint_dtype = stored;
  info.compute_dtype = compute;
  info.parameters = w.TotalParameters();
  info.hidden_size = config.hidden_size;
  info.num_layers = config.num_hidden_layers;
  info.max_sequence_length = e->model_->max_sequence_length();
  if (st.max_seq_length > 0)
    info.max_sequence_length = std::min(info.max_sequence_length, st.max_seq_length);
  info.head = e->head_.description;
  info.weights = w.description();
  info.backend = e->backend_->Describe();
  info.st_modules = st.module_types;
  const bool causal_last =
      e->model_->SupportsPrefixReuse() && e->head_.pooling == PoolingKind::kLast;
  e->prefix_reuse_ =
      causal_last &&
      (options.prefix_reuse == PrefixReuse::kOn ||
       (options.prefix_reuse == PrefixReuse::kAuto && e->backend_->kind() == DeviceKind::kCuda));
  for (Slot& slot : e->slots_) slot.done = e->backend_->CreateFence();
  if (e->backend_->kind() == DeviceKind::kCuda) {
    RETURN_IF_ERROR(e->WarmUp());
    const bool graphs = options.cuda_graphs == CudaGraphs::kOn ||
                        (options.cuda_graphs == CudaGraphs::kAuto && !options.profile);
    if (graphs) {
      Status recorded = e->CaptureGraphs();
      if (!recorded.ok() && options.cuda_graphs == CudaGraphs::kOn) return recorded;
      if (!recorded.ok()) {  // auto: run eagerly rather than not at all
        SLUICE_LOG_WARN("CUDA graphs off: {}", recorded.message());
        e->graphs_.clear();
        e->graph_workspace_.reset();
      }
    }
  }
  return e;
}

Status Engine::WarmUp() {
  // One forward over a full token budget: allocates the largest workspaces and prepares
  // the GEMM plans of that size once, so the first real batch runs at full speed.
  const int64_t budget = options_.max_batch_tokens;
  const int max_len = info_.max_sequence_length > 0 ? info_.max_sequence_length : 512;
  int64_t len = std::max<int64_t>((budget + options_.max_num_seqs - 1) / options_.max_num_seqs,
                                  std::min(128, max_len));
  len = std::min<int64_t>(len, max_len);
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(budget / len, options_.max_num_seqs));
  ForwardBatch batch;
  std::vector<int32_t> ids(static_cast<size_t>(std::min(len, budget)), 0);
  for (int64_t i = 0; i < n; ++i) batch.Add(ids);
  std::vector<SequenceOutput> outputs(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  // No prefix detection: the identical warm-up sequences must not take the shared-prefix
  // path, which would size the workspaces for a far smaller batch.
  RETURN_IF_ERROR(SubmitImpl(batch, outputs.data(), false).WithContext("warm-up forward"));
  RETURN_IF_ERROR(Complete());
  // The CUDA backend picks GEMM algorithms by timing them once per power-of-two class of
  // rows (from 1024 rows): one forward per class below the budget, so that no request pays
  // for the timing (~50 ms the first time a batch of a new size class runs).
  int forwards = 1;
  if (backend_->asynchronous()) {
    for (int64_t m = 1024; m < budget; m *= 2) {
      const int64_t k = std::max<int64_t>(1, m / static_cast<int64_t>(ids.size()));
      if (k > options_.max_num_seqs) break;
      ForwardBatch b;
      for (int64_t i = 0; i < k; ++i) b.Add(ids);
      outputs.assign(static_cast<size_t>(k), SequenceOutput{});
      RETURN_IF_ERROR(SubmitImpl(b, outputs.data(), false).WithContext("warm-up forward"));
      RETURN_IF_ERROR(Complete());
      ++forwards;
    }
  }
  SLUICE_LOG_INFO("warmed up: {} forward(s), the largest {} x {} tokens, in {:.2f} s", forwards, n,
                  ids.size(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ResetProfile();
  return Status::Ok();
}

std::string Engine::ProfileReport() const {
  auto* p = dynamic_cast<const ProfilingBackend*>(backend_.get());
  return p ? p->Report() : std::string();
}

void Engine::ResetProfile() {
  if (auto* p = dynamic_cast<ProfilingBackend*>(backend_.get())) p->Reset();
}

namespace {
// Workspace slots of the engine (the models use small numbers, inputs/pooling 1000+).
enum EngineSlots { kSlotInputs = 1000, kSlotPooled = 2000, kSlotHeadDense = 2001 };
}  // namespace

Status Engine::CaptureGraphs() {
  const std::vector<int64_t> buckets =
      GraphBuckets(std::min(options_.cuda_graph_max_tokens, options_.max_batch_tokens));
  if (buckets.empty()) return Status::Ok();
  const int64_t free_before = backend_->DeviceMemoryFree();
  const auto t0 = std::chrono::steady_clock::now();
  graph_workspace_ = std::make_unique<Workspace>(backend_.get());
  const InputLayout top{buckets.back(), buckets.back()};
  graph_inputs_ = graph_workspace_->Get(kSlotInputs, DType::kI32, 1, top.size());
  HostBuffer staging = backend_->AllocateHost(static_cast<size_t>(top.size()) * sizeof(int32_t));
  const int max_len = info_.max_sequence_length > 0 ? info_.max_sequence_length : 512;
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
    const DeviceBatch db = model_->BindInputs(fb, layout, OutputRows::kNone, dev, true);
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

std::vector<int64_t> Engine::graph_buckets() const {
  std::vector<int64_t> out;
  for (const auto& g : graphs_) out.push_back(g.tokens);
  return out;
}

const Engine::GraphBucket* Engine::FindGraph(int64_t tokens) const {
  auto it = std::lower_bound(graphs_.begin(), graphs_.end(), tokens,
                             [](const GraphBucket& g, int64_t t) { return g.tokens < t; });
  return it == graphs_.end() ? nullptr : &*it;
}

Status Engine::RunBatch(const std::vector<const SequenceInput*>& inputs, SequenceOutput* outputs) {
  batch_.Clear();
  for (const SequenceInput* in : inputs) batch_.Add(in->ids, in->type_ids);
  return RunPacked(batch_, outputs);
}

// A shared prefix shorter than this is not worth a separate sequence.
constexpr int kMinSharedPrefix = 4;

Status Engine::RunPacked(const ForwardBatch& batch, SequenceOutput* outputs) {
  RETURN_IF_ERROR(Submit(batch, outputs));
  while (in_flight_ > 0) RETURN_IF_ERROR(Complete());
  return Status::Ok();
}

bool Engine::pipelined() const { return backend_->asynchronous(); }

Status Engine::Submit(const ForwardBatch& batch, SequenceOutput* outputs) {
  return SubmitImpl(batch, outputs, true);
}

Status Engine::SubmitImpl(const ForwardBatch& batch, SequenceOutput* outputs, bool detect_prefix) {
  if (in_flight_ == kMaxInFlight) {
    return FailedPrecondition("Engine::Submit: " + std::to_string(kMaxInFlight) +
                              " batches already in flight; Complete one first");
  }
  Slot& slot = slots_[(oldest_ + in_flight_) % kMaxInFlight];
  const int S = batch.num_seqs();
  groups_.clear();
  if (detect_prefix && prefix_reuse_ && batch.prefix_of.empty() && S >= 2 &&
      batch.token_type_ids.empty()) {
    groups_ =
        FindPrefixGroups(batch.token_ids.data(), batch.cu_seqlens.data(), S, kMinSharedPrefix);
  }
  const ForwardBatch* run = &batch;
  slot.packed_index.clear();
  if (!groups_.empty()) {
    // Each group: its prefix as a sequence, then each member's own tokens; sequences in no
    // group as they are. Input order is kept.
    const int32_t* ids = batch.token_ids.data();
    const auto& cu = batch.cu_seqlens;
    ForwardBatch& pb = slot.prefix_batch;
    pb.Clear();
    slot.packed_index.resize(static_cast<size_t>(S));
    size_t g = 0;
    for (int s = 0; s < S;) {
      if (g < groups_.size() && groups_[g].first == s) {
        const PrefixGroup& gr = groups_[g++];
        const int prefix_seq = pb.num_seqs();
        pb.AddWithPrefix(ids + cu[s], gr.prefix, -1);
        for (int m = s; m < s + gr.count; ++m) {
          slot.packed_index[m] = pb.num_seqs();
          pb.AddWithPrefix(ids + cu[m] + gr.prefix, cu[m + 1] - cu[m] - gr.prefix, prefix_seq);
        }
        s += gr.count;
      } else {
        slot.packed_index[s] = pb.num_seqs();
        pb.AddWithPrefix(ids + cu[s], cu[s + 1] - cu[s], -1);
        ++s;
      }
    }
    run = &pb;
  }
  RETURN_IF_ERROR(model_->Validate(*run));
  RETURN_IF_ERROR(Enqueue(*run, slot));
  slot.outputs = outputs;
  ++in_flight_;
  if (!groups_.empty()) {
    prefix_stats_.batches += 1;
    prefix_stats_.groups += static_cast<int64_t>(groups_.size());
    prefix_stats_.tokens_saved += PrefixTokensSaved(groups_);
  }
  return Status::Ok();
}

Status Engine::Enqueue(const ForwardBatch& batch, Slot& slot) {
  const int64_t T = batch.num_tokens();
  const int S = batch.num_seqs();
  const int H = model_->hidden_size();
  const bool token_level =
      head_.pooling == PoolingKind::kAll || head_.pooling == PoolingKind::kStep;
  // CLS/LAST pooling needs one row per sequence: an eager forward then skips the last
  // layer's per-token work for the others and returns exactly those rows.
  const OutputRows rows = head_.pooling == PoolingKind::kCls    ? OutputRows::kFirst
                          : head_.pooling == PoolingKind::kLast ? OutputRows::kLast
                                                                : OutputRows::kNone;
  const GraphBucket* graph = FindGraph(T);
  const InputLayout layout = graph ? InputLayout{graph->tokens, graph->tokens} : InputLayout{T, S};

  // Inputs: packed on the host into pinned staging, one asynchronous copy.
  const size_t in_bytes = static_cast<size_t>(layout.size()) * sizeof(int32_t);
  if (slot.inputs.size() < in_bytes) slot.inputs = backend_->AllocateHost(in_bytes + in_bytes / 4);
  model_->PackInputs(batch, layout, rows, slot.inputs.as<int32_t>());
  Tensor dev = graph ? graph_inputs_ : workspace_->Get(kSlotInputs, DType::kI32, 1, layout.size());
  dev.cols = layout.size();
  backend_->CopyFromHostAsync(slot.inputs.data(), dev);
  DeviceBatch db = model_->BindInputs(batch, layout, rows, dev, graph != nullptr);

  Tensor hidden;
  if (graph) {
    backend_->Replay(*graph->recording, {S, batch.max_seqlen});
    hidden = graph->hidden.RowSlice(0, T);  // the padding rows after T are never read
    ++graph_batches_;
  } else {
    StatusOr<Tensor> h = model_->Forward(db, *workspace_);
    if (!h.ok()) {
      backend_->Synchronize();  // the upload may still read the slot's staging
      return h.status();
    }
    hidden = *h;
  }

  // What comes back to the host: every token row (ALL/STEP), or one row per sequence after
  // pooling and the head's first dense layer.
  Tensor result;
  slot.first_layer = 0;
  slot.cu_seqlens.clear();
  slot.token_ids.clear();
  if (token_level) {
    result = hidden;
    slot.cu_seqlens = batch.cu_seqlens;
    if (head_.pooling == PoolingKind::kStep) slot.token_ids = batch.token_ids;
  } else {
    Tensor pooled;
    if (rows != OutputRows::kNone && !graph) {
      pooled = hidden;  // the forward returned the output rows
    } else if (rows != OutputRows::kNone) {
      pooled = workspace_->Get(kSlotPooled, hidden.dtype, S, H);
      backend_->GatherRows(hidden, db.output_rows.ptr<int32_t>(), S, pooled);
    } else {
      pooled = workspace_->Get(kSlotPooled, DType::kF32, S, H);
      PoolParams pp;
      pp.hidden = hidden;
      pp.out = pooled;
      pp.cu_seqlens = db.cu_seqlens.ptr<int32_t>();
      pp.num_seqs = S;
      pp.mode = head_.pooling == PoolingKind::kMax    ? PoolMode::kMax
                : head_.pooling == PoolingKind::kMean ? PoolMode::kMean
                : head_.pooling == PoolingKind::kCls  ? PoolMode::kCls
                                                      : PoolMode::kLast;
      backend_->Pool(pp);
    }
    result = pooled;
    if (head_dense_) {  // the head's first matrix product on the device
      result = workspace_->Get(kSlotHeadDense, DType::kF32, S, head_dense_->out_features);
      backend_->Linear({head_dense_.get(), pooled, result});
      slot.first_layer = 1;
    }
  }
  slot.rows = static_cast<int>(result.rows);
  slot.width = static_cast<int>(result.cols);
  const size_t out_bytes = static_cast<size_t>(result.numel()) * sizeof(float);
  if (slot.results.size() < out_bytes) {
    slot.results = backend_->AllocateHost(out_bytes + out_bytes / 4);
  }
  backend_->CopyToHostF32Async(result, slot.results.as<float>());
  slot.done->Record();
  return Status::Ok();
}

Status Engine::Complete() {
  if (in_flight_ == 0) return FailedPrecondition("Engine::Complete: no batch in flight");
  Slot& slot = slots_[oldest_];
  slot.done->Wait();
  oldest_ = (oldest_ + 1) % kMaxInFlight;
  --in_flight_;
  const float* r = slot.results.as<float>();
  const int H = slot.width;
  if (head_.pooling != PoolingKind::kAll && head_.pooling != PoolingKind::kStep) {
    if (slot.packed_index.empty()) {
      HeadRunner(head_, slot.first_layer).Apply(r, slot.rows, H, slot.outputs);
      return Status::Ok();
    }
    // Shared-prefix groups: the rows of the input sequences, in input order.
    const size_t n = slot.packed_index.size();
    slot.gathered.resize(n * H);
    for (size_t s = 0; s < n; ++s) {
      std::copy_n(r + static_cast<size_t>(slot.packed_index[s]) * H, H,
                  slot.gathered.data() + s * H);
    }
    HeadRunner(head_, slot.first_layer)
        .Apply(slot.gathered.data(), static_cast<int>(n), H, slot.outputs);
    return Status::Ok();
  }
  HeadRunner runner(head_);
  const std::vector<int32_t>& cu = slot.cu_seqlens;
  std::vector<float> rows;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int32_t b = cu[s], e = cu[s + 1];
    SequenceOutput& out = slot.outputs[s];
    out.token_indices.clear();
    if (head_.pooling == PoolingKind::kAll) {
      runner.ApplyTokens(r + static_cast<size_t>(b) * H, e - b, H, &out);
      continue;
    }
    rows.clear();
    for (int32_t i = b; i < e; ++i) {
      if (slot.token_ids[i] == head_.step_token_id) {
        rows.insert(rows.end(), r + static_cast<size_t>(i) * H, r + static_cast<size_t>(i + 1) * H);
        out.token_indices.push_back(i - b);
      }
    }
    runner.ApplyTokens(rows.data(), static_cast<int>(out.token_indices.size()), H, &out);
  }
  return Status::Ok();
}

void Engine::Abandon() {
  while (in_flight_ > 0) {
    slots_[oldest_].done->Wait();
    oldest_ = (oldest_ + 1) % kMaxInFlight;
    --in_flight_;
  }
}

StatusOr<std::vector<SequenceOutput>> Engine::Run(const std::vector<SequenceInput>& inputs,
                                                  const ProgressFn& progress) {
  if (in_flight_ > 0) return FailedPrecondition("Engine::Run: batches already in flight");
  std::vector<SequenceOutput> outputs(inputs.size());
  const int max_len = info_.max_sequence_length;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t n = inputs[i].ids.size();
    if (n == 0) return InvalidArgument("input " + std::to_string(i) + " has no tokens");
    if (max_len > 0 && n > static_cast<size_t>(max_len)) {
      return OutOfRange("input " + std::to_string(i) + " has " + std::to_string(n) +
                        " tokens, over the model's limit of " + std::to_string(max_len));
    }
    if (!inputs[i].type_ids.empty() && inputs[i].type_ids.size() != n) {
      return InvalidArgument("input " + std::to_string(i) + ": token_type_ids length differs");
    }
  }
  // Batches in input order; batch k + 1 is packed and submitted before batch k completes,
  // so the host work of both overlaps the device's.
  struct Pending {
    size_t seqs;
    int64_t tokens;
  };
  Pending pending[kMaxInFlight];
  int pending_first = 0;
  size_t start = 0, done = 0, group_seqs = 0;
  int64_t tokens = 0, done_tokens = 0;
  auto complete = [&]() -> Status {
    RETURN_IF_ERROR(Complete());
    const Pending& p = pending[pending_first];
    pending_first = (pending_first + 1) % kMaxInFlight;
    done += p.seqs;
    done_tokens += p.tokens;
    if (progress) progress(done, inputs.size(), done_tokens);
    return Status::Ok();
  };
  auto flush = [&]() -> Status {
    if (group_seqs == 0) return Status::Ok();
    if (in_flight_ == kMaxInFlight) RETURN_IF_ERROR(complete());
    Status st = Submit(batch_, outputs.data() + start);
    if (!st.ok()) {
      Abandon();
      return st.WithContext("batch of inputs " + std::to_string(start) + ".." +
                            std::to_string(start + group_seqs - 1));
    }
    pending[(pending_first + in_flight_ - 1) % kMaxInFlight] = {group_seqs, tokens};
    start += group_seqs;
    group_seqs = 0;
    tokens = 0;
    batch_.Clear();
    return Status::Ok();
  };
  batch_.Clear();
  for (const auto& in : inputs) {
    const int64_t n = static_cast<int64_t>(in.ids.size());
    if (group_seqs > 0 && (tokens + n > options_.max_batch_tokens ||
                           static_cast<int>(group_seqs) >= options_.max_num_seqs)) {
      RETURN_IF_ERROR(flush());
    }
    batch_.Add(in.ids, in.type_ids);
    ++group_seqs;
    tokens += n;
  }
  RETURN_IF_ERROR(flush());
  while (in_flight_ > 0) RETURN_IF_ERROR(complete());
  return outputs;
}

}  // namespace sluice
