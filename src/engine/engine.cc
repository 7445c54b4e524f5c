#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "backend/profiling_backend.h"
#include "core/log.h"

namespace sluice {

Engine::~Engine() = default;

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
  if (options.max_batch_tokens <= 0 || options.max_num_seqs <= 0) {
    return InvalidArgument("max_batch_tokens and max_num_seqs must be positive");
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
  if (e->backend_->kind() == DeviceKind::kCuda) RETURN_IF_ERROR(e->WarmUp());
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
  // RunForward, not RunPacked: the identical warm-up sequences must not take the
  // shared-prefix path, which would size the workspaces for a far smaller batch.
  RETURN_IF_ERROR(RunForward(batch, outputs.data()).WithContext("warm-up forward"));
  SLUICE_LOG_INFO("warmed up: one forward of {} x {} tokens in {:.2f} s", n, ids.size(),
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

Status Engine::RunBatch(const std::vector<const SequenceInput*>& inputs, SequenceOutput* outputs) {
  batch_.Clear();
  for (const SequenceInput* in : inputs) batch_.Add(in->ids, in->type_ids);
  return RunPacked(batch_, outputs);
}

// A shared prefix shorter than this is not worth a separate sequence.
constexpr int kMinSharedPrefix = 4;

Status Engine::RunPacked(const ForwardBatch& batch, SequenceOutput* outputs) {
  const int S = batch.num_seqs();
  if (!prefix_reuse_ || !batch.prefix_of.empty() || S < 2 || !batch.token_type_ids.empty()) {
    return RunForward(batch, outputs);
  }
  const int32_t* ids = batch.token_ids.data();
  const auto& cu = batch.cu_seqlens;
  groups_ = FindPrefixGroups(ids, cu.data(), S, kMinSharedPrefix);
  if (groups_.empty()) return RunForward(batch, outputs);
  // Each group: its prefix as a sequence, then each member's own tokens; sequences in no
  // group as they are. Input order is kept.
  ForwardBatch& pb = prefix_batch_;
  pb.Clear();
  packed_index_.resize(static_cast<size_t>(S));
  size_t g = 0;
  for (int s = 0; s < S;) {
    if (g < groups_.size() && groups_[g].first == s) {
      const PrefixGroup& gr = groups_[g++];
      const int prefix_seq = pb.num_seqs();
      pb.AddWithPrefix(ids + cu[s], gr.prefix, -1);
      for (int m = s; m < s + gr.count; ++m) {
        packed_index_[m] = pb.num_seqs();
        pb.AddWithPrefix(ids + cu[m] + gr.prefix, cu[m + 1] - cu[m] - gr.prefix, prefix_seq);
      }
      s += gr.count;
    } else {
      packed_index_[s] = pb.num_seqs();
      pb.AddWithPrefix(ids + cu[s], cu[s + 1] - cu[s], -1);
      ++s;
    }
  }
  prefix_outputs_.resize(static_cast<size_t>(pb.num_seqs()));
  RETURN_IF_ERROR(RunForward(pb, prefix_outputs_.data()));
  for (int s = 0; s < S; ++s) outputs[s] = std::move(prefix_outputs_[packed_index_[s]]);
  prefix_stats_.batches += 1;
  prefix_stats_.groups += static_cast<int64_t>(groups_.size());
  prefix_stats_.tokens_saved += PrefixTokensSaved(groups_);
  return Status::Ok();
}

Status Engine::RunForward(const ForwardBatch& batch, SequenceOutput* outputs) {
  RETURN_IF_ERROR(model_->Validate(batch));
  DeviceBatch db = model_->PrepareBatch(batch, *workspace_);
  // CLS/LAST pooling needs one row per sequence: the model skips the last layer's
  // per-token work for the others and returns exactly the pooled rows.
  const bool row_pooling =
      head_.pooling == PoolingKind::kCls || head_.pooling == PoolingKind::kLast;
  if (row_pooling) model_->SelectOutputRows(db, *workspace_, head_.pooling == PoolingKind::kCls);
  ASSIGN_OR_RETURN(Tensor hidden, model_->Forward(db, *workspace_));
  const int H = model_->hidden_size();
  const int S = db.num_seqs;
  HeadRunner runner(head_);
  if (head_.pooling == PoolingKind::kAll || head_.pooling == PoolingKind::kStep) {
    host_pooled_.resize(static_cast<size_t>(db.num_tokens) * H);
    backend_->CopyToHostF32(hidden, host_pooled_.data());
    for (int s = 0; s < S; ++s) {
      const int32_t b = batch.cu_seqlens[s], e = batch.cu_seqlens[s + 1];
      SequenceOutput& out = outputs[s];
      out.token_indices.clear();
      if (head_.pooling == PoolingKind::kAll) {
        runner.ApplyTokens(host_pooled_.data() + static_cast<size_t>(b) * H, e - b, H, &out);
      } else {
        std::vector<float> rows;
        for (int32_t i = b; i < e; ++i) {
          if (batch.token_ids[i] == head_.step_token_id) {
            rows.insert(rows.end(), host_pooled_.begin() + static_cast<size_t>(i) * H,
                        host_pooled_.begin() + static_cast<size_t>(i + 1) * H);
            out.token_indices.push_back(i - b);
          }
        }
        runner.ApplyTokens(rows.data(), static_cast<int>(out.token_indices.size()), H, &out);
      }
    }
    return Status::Ok();
  }
  if (row_pooling) return FinishHead(hidden, S, outputs);
  Tensor pooled = workspace_->Get(2000, DType::kF32, S, H);
  PoolParams pp;
  pp.hidden = hidden;
  pp.out = pooled;
  pp.cu_seqlens = db.cu_seqlens.ptr<int32_t>();
  pp.num_seqs = S;
  switch (head_.pooling) {
    case PoolingKind::kCls:
      pp.mode = PoolMode::kCls;
      break;
    case PoolingKind::kMean:
      pp.mode = PoolMode::kMean;
      break;
    case PoolingKind::kMax:
      pp.mode = PoolMode::kMax;
      break;
    default:
      pp.mode = PoolMode::kLast;
      break;
  }
  backend_->Pool(pp);
  return FinishHead(pooled, S, outputs);
}

Status Engine::FinishHead(const Tensor& pooled, int S, SequenceOutput* outputs) {
  Tensor rows = pooled;
  int first_layer = 0;
  if (head_dense_) {  // the head's first matrix product on the device
    rows = workspace_->Get(2001, DType::kF32, S, head_dense_->out_features);
    backend_->Linear({head_dense_.get(), pooled, rows});
    first_layer = 1;
  }
  const int width = static_cast<int>(rows.cols);
  host_pooled_.resize(static_cast<size_t>(S) * width);
  backend_->CopyToHostF32(rows, host_pooled_.data());
  HeadRunner(head_, first_layer).Apply(host_pooled_.data(), S, width, outputs);
  return Status::Ok();
}

StatusOr<std::vector<SequenceOutput>> Engine::Run(const std::vector<SequenceInput>& inputs,
                                                  const ProgressFn& progress) {
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
  std::vector<const SequenceInput*> group;
  size_t start = 0, done = 0;
  int64_t tokens = 0, done_tokens = 0;
  auto flush = [&]() -> Status {
    if (group.empty()) return Status::Ok();
    RETURN_IF_ERROR(RunBatch(group, outputs.data() + start)
                        .WithContext("batch of inputs " + std::to_string(start) + ".." +
                                     std::to_string(start + group.size() - 1)));
    done += group.size();
    done_tokens += tokens;
    if (progress) progress(done, inputs.size(), done_tokens);
    start += group.size();
    group.clear();
    tokens = 0;
    return Status::Ok();
  };
  for (const auto& in : inputs) {
    const int64_t n = static_cast<int64_t>(in.ids.size());
    if (!group.empty() && (tokens + n > options_.max_batch_tokens ||
                           static_cast<int>(group.size()) >= options_.max_num_seqs)) {
      RETURN_IF_ERROR(flush());
    }
    group.push_back(&in);
    tokens += n;
  }
  RETURN_IF_ERROR(flush());
  return outputs;
}

}  // namespace sluice
