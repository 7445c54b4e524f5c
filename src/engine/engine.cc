#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/log.h"

namespace sluice {

Engine::~Engine() {
  // Queued copies may still target the slots' pinned memory.
  if (runner_) Abandon();
}

StatusOr<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& options) {
  ASSIGN_OR_RETURN(std::shared_ptr<const ModelBundle> bundle, LoadModelBundle(options.model_dir));
  return Load(std::move(bundle), options);
}

StatusOr<std::unique_ptr<Engine>> Engine::Load(std::shared_ptr<const ModelBundle> bundle,
                                               const EngineOptions& options) {
  auto e = std::unique_ptr<Engine>(new Engine());
  e->options_ = options;
  e->options_.model_dir = bundle->dir;
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
  const ModelBundle& b = *bundle;
  RunnerOptions ro;
  ro.dtype = options.dtype;
  ro.backend = options.backend;
  ro.profile = options.profile;
  ro.activation_residual = options.activation_residual;
  ASSIGN_OR_RETURN(e->runner_, ModelRunner::Create(bundle, ro));

  HeadResolveInput hi;
  hi.arch = b.arch;
  hi.config = &b.config;
  hi.st = &b.st;
  hi.overrides = &b.overrides;
  hi.weights = b.weights.get();
  hi.weight_prefix = b.weight_prefix;
  hi.task = options.task;
  ASSIGN_OR_RETURN(HeadSpec head, ResolveHead(hi));
  if (head.task == Task::kGenerate) {
    return InvalidArgument(
        b.arch->name +
        " defaults to task generate, which runs with `sluice generate` and `sluice serve`; to "
        "score with it as a yes/no reranker (Qwen3-Reranker), "
        "pass --task score or name the yes/no tokens in sluice.json");
  }
  ASSIGN_OR_RETURN(e->pooler_, Pooler::Create(e->runner_.get(), std::move(head)));

  const Model& model = e->runner_->model();
  ModelInfo& info = e->info_;
  info.dir = b.dir;
  info.architecture = b.arch->name;
  info.family = b.arch->family;
  info.task = e->head().task;
  info.checkpoint_dtype = e->runner_->checkpoint_dtype();
  info.compute_dtype = e->runner_->compute_dtype();
  info.parameters = b.weights->TotalParameters();
  info.hidden_size = b.config.hidden_size;
  info.num_layers = b.config.num_hidden_layers;
  info.max_sequence_length = model.max_sequence_length();
  if (b.st.max_seq_length > 0)
    info.max_sequence_length = std::min(info.max_sequence_length, b.st.max_seq_length);
  info.head = e->head().description;
  info.weights = b.weights->description();
  info.backend = e->runner_->backend().Describe();
  info.linear_layers = e->runner_->backend().DescribeLinearWeights();
  info.st_modules = b.st.module_types;
  info.residual_dtype = model.ResidualDType();
  info.residual_selectable = model.ResidualDTypeSelectable();
  e->limits_.vocab_size = b.config.vocab_size;
  e->limits_.type_vocab_size = b.config.type_vocab_size;
  e->limits_.max_tokens = info.max_sequence_length;
  e->limits_.key_limits = model.SupportsKeyLimits();
  const bool causal_last = model.SupportsPrefixReuse() && e->head().pooling == PoolingKind::kLast;
  const bool cuda = e->runner_->backend().kind() == DeviceKind::kCuda;
  e->prefix_reuse_ = causal_last && (options.prefix_reuse == PrefixReuse::kOn ||
                                     (options.prefix_reuse == PrefixReuse::kAuto && cuda));
  for (Slot& slot : e->slots_) slot.done = e->runner_->backend().CreateFence();
  if (cuda) {
    RETURN_IF_ERROR(e->WarmUp());
    const bool graphs = options.cuda_graphs == CudaGraphs::kOn ||
                        (options.cuda_graphs == CudaGraphs::kAuto && !options.profile);
    if (graphs) {
      const int max_len = info.max_sequence_length > 0 ? info.max_sequence_length : 512;
      Status recorded = e->runner_->CaptureGraphs(
          std::min(e->options_.cuda_graph_max_tokens, e->options_.max_batch_tokens), max_len);
      if (!recorded.ok() && options.cuda_graphs == CudaGraphs::kOn) return recorded;
      if (!recorded.ok()) {  // auto: run eagerly rather than not at all
        SLUICE_LOG_WARN("CUDA graphs off: {}", recorded.message());
        e->runner_->DropGraphs();
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
  std::vector<PooledOutput> outputs(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  // No prefix detection: the identical warm-up sequences must not take the shared-prefix
  // path, which would size the workspaces for a far smaller batch.
  RETURN_IF_ERROR(SubmitImpl(batch, outputs.data(), false).WithContext("warm-up forward"));
  RETURN_IF_ERROR(Complete());
  // The CUDA backend picks GEMM algorithms by timing them once per power-of-two class of
  // rows (from 1024 rows): one forward per class below the budget, so that no request pays
  // for the timing (~50 ms the first time a batch of a new size class runs). Under --profile
  // too (its backend is not asynchronous), so that no profiled batch times the candidates.
  int forwards = 1;
  if (runner_->backend().kind() == DeviceKind::kCuda) {
    for (int64_t m = 1024; m < budget; m *= 2) {
      const int64_t k = std::max<int64_t>(1, m / static_cast<int64_t>(ids.size()));
      if (k > options_.max_num_seqs) break;
      ForwardBatch b;
      for (int64_t i = 0; i < k; ++i) b.Add(ids);
      outputs.assign(static_cast<size_t>(k), PooledOutput{});
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

std::string Engine::ProfileReport() const { return runner_->ProfileReport(); }

void Engine::ResetProfile() { runner_->ResetProfile(); }

Status Engine::RunBatch(const std::vector<const TokenSequence*>& inputs, PooledOutput* outputs) {
  batch_.Clear();
  for (const TokenSequence* in : inputs) batch_.Add(*in);
  return RunPacked(batch_, outputs);
}

// A shared prefix shorter than this is not worth a separate sequence.
constexpr int kMinSharedPrefix = 4;

Status Engine::RunPacked(const ForwardBatch& batch, PooledOutput* outputs) {
  RETURN_IF_ERROR(Submit(batch, outputs));
  while (in_flight_ > 0) RETURN_IF_ERROR(Complete());
  return Status::Ok();
}

bool Engine::pipelined() const { return runner_->backend().asynchronous(); }

Status Engine::Submit(const ForwardBatch& batch, PooledOutput* outputs) {
  return SubmitImpl(batch, outputs, true);
}

Status Engine::SubmitImpl(const ForwardBatch& batch, PooledOutput* outputs, bool detect_prefix) {
  if (in_flight_ == kMaxInFlight) {
    return FailedPrecondition("Engine::Submit: " + std::to_string(kMaxInFlight) +
                              " batches already in flight; Complete one first");
  }
  const int index = (oldest_ + in_flight_) % kMaxInFlight;
  Slot& slot = slots_[index];
  const int S = batch.num_seqs();
  groups_.clear();
  if (detect_prefix && prefix_reuse_ && batch.prefix_of.empty() && S >= 2 &&
      batch.token_type_ids.empty() && batch.key_lens.empty()) {
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
  ASSIGN_OR_RETURN(RunnerForward f, runner_->Run(*run, pooler_->rows(), &slot.inputs));
  RETURN_IF_ERROR(pooler_->Enqueue(*run, f, index));
  slot.done->Record();
  slot.outputs = outputs;
  ++in_flight_;
  if (!groups_.empty()) {
    prefix_stats_.batches += 1;
    prefix_stats_.groups += static_cast<int64_t>(groups_.size());
    prefix_stats_.tokens_saved += PrefixTokensSaved(groups_);
  }
  return Status::Ok();
}

Status Engine::Complete() {
  if (in_flight_ == 0) return FailedPrecondition("Engine::Complete: no batch in flight");
  const int index = oldest_;
  Slot& slot = slots_[index];
  slot.done->Wait();
  oldest_ = (oldest_ + 1) % kMaxInFlight;
  --in_flight_;
  pooler_->Complete(index, slot.packed_index, slot.outputs);
  return Status::Ok();
}

void Engine::Abandon() {
  while (in_flight_ > 0) {
    slots_[oldest_].done->Wait();
    oldest_ = (oldest_ + 1) % kMaxInFlight;
    --in_flight_;
  }
}

StatusOr<std::vector<PooledOutput>> Engine::Run(const std::vector<TokenSequence>& inputs,
                                                const ProgressFn& progress) {
  if (in_flight_ > 0) return FailedPrecondition("Engine::Run: batches already in flight");
  std::vector<PooledOutput> outputs(inputs.size());
  RETURN_IF_ERROR(ValidateSequences(limits_, inputs));
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
    batch_.Add(in);
    ++group_seqs;
    tokens += n;
  }
  RETURN_IF_ERROR(flush());
  while (in_flight_ > 0) RETURN_IF_ERROR(complete());
  return outputs;
}

}  // namespace sluice
