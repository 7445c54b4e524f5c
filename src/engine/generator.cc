#include "engine/generator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace {

// Default step limits per device (GenerationOptions 0 = these).
constexpr int64_t kCpuMaxBatchedTokens = 2048, kCudaMaxBatchedTokens = 16384;
constexpr int kCpuMaxGenSeqs = 64, kCudaMaxGenSeqs = 512;
constexpr int64_t kCpuKvCacheBytes = 2ll << 30;

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

// A sequence's engine-side state: its scheduler view, its request and output, and what its
// stop checks and sampling need.
struct Generator::SeqState {
  GenSequence seq;
  std::shared_ptr<GenerateRequest> request;
  int index = 0;  // which of the request's n outputs
  uint64_t seed = 0;
  ResolvedSampling rs;
  std::unique_ptr<DecodeStream> detok;
  bool finished = false;
  bool fork_pending = false;        // index 0 of n > 1, before its first token: samples n rows
  int prompt_logprob_next = 1;      // the next prompt position whose logprob is due
  std::vector<int32_t> prompt_set;  // distinct prompt tokens (repetition penalty)
  std::unordered_map<int32_t, int> output_counts;
  // Structured outputs: the grammar and its DFA state after the tokens so far (for the stop
  // check; the mask comes from the structured-output logits processor).
  std::shared_ptr<structured::Grammar> grammar;
  int32_t gstate = 0;
  Status mask_error;  // a logits processor failed on this sequence: fails its request
  // Logits processors: memberships (sized once, in AttachProcessors), what they are told.
  std::vector<LpSlot> lps;
  sluice_request_params cparams{};
  sluice_token_view out_view{};
  CompletionOutput& out() { return request->outputs[index]; }
};

Status Generator::SelectProcessors(GenerateRequest& r) const {
  const SamplingParams& p = r.params;
  if (p.logits_processors.empty()) {
    if (!p.extra_args.empty()) {
      return InvalidArgument("extra_args: given, but no logits_processors read it");
    }
    return Status::Ok();
  }
  const PluginSet* set = options_.plugins.get();
  for (size_t i = 0; i < p.logits_processors.size(); ++i) {
    const std::string& name = p.logits_processors[i];
    for (size_t j = 0; j < i; ++j) {
      if (p.logits_processors[j] == name) {
        return InvalidArgument("logits_processors: \"" + name + "\" is named twice");
      }
    }
    const LogitsProcessorFactory* f = set != nullptr ? set->Find(name) : nullptr;
    if (f == nullptr) {
      return InvalidArgument("logits_processors: unknown logits processor \"" + name +
                             "\" (loaded: " + (set != nullptr ? set->Names() : "none") + ")");
    }
    sluice_request_params c{};
    c.struct_size = sizeof c;
    c.request_id = r.id.c_str();
    c.extra_args = p.extra_args.empty() ? "{}" : p.extra_args.c_str();
    c.extra_args_len = p.extra_args.empty() ? 2 : p.extra_args.size();
    c.n = p.n;
    c.index = 0;
    c.temperature = p.temperature ? *p.temperature : 1.f;
    c.vocab_size = limits_.vocab_size;
    RETURN_IF_ERROR(f->Validate(c));
  }
  return Status::Ok();
}

void Generator::AttachProcessors(SeqState& s) {
  const GenerateRequest& r = *s.request;
  const SamplingParams& p = r.params;
  s.cparams.struct_size = sizeof s.cparams;
  s.cparams.request_id = r.id.c_str();
  s.cparams.extra_args = p.extra_args.empty() ? "{}" : p.extra_args.c_str();
  s.cparams.extra_args_len = p.extra_args.empty() ? 2 : p.extra_args.size();
  s.cparams.n = p.n;
  s.cparams.index = s.index;
  s.cparams.temperature = s.rs.temperature;
  s.cparams.vocab_size = limits_.vocab_size;
  s.out_view.ids = s.out().token_ids.data();
  s.out_view.size = static_cast<int64_t>(s.out().token_ids.size());
  std::vector<int> procs;
  if (s.grammar) procs.push_back(0);
  for (const std::string& name : p.logits_processors) {
    for (size_t i = 1; i < processors_.size(); ++i) {
      if (options_.plugins->processors()[i - 1]->name() == name)
        procs.push_back(static_cast<int>(i));
    }
  }
  s.lps.assign(procs.size(), LpSlot{});
  for (size_t i = 0; i < procs.size(); ++i) {
    LpSlot& slot = s.lps[i];
    slot.proc = procs[i];
    slot.info.params = &p;
    slot.info.c.params = &s.cparams;
    slot.info.c.prompt.ids = r.prompt.data();
    slot.info.c.prompt.size = static_cast<int64_t>(r.prompt.size());
    slot.info.c.output = &s.out_view;
  }
}

void Generator::DetachProcessors(SeqState& s) {
  for (LpSlot& slot : s.lps) lp_rows_[static_cast<size_t>(slot.proc)]->Remove(&slot);
}

void Generator::FillMasks(uint32_t* masks, int32_t* allowed) {
  LpMaskOut out;
  out.masks = masks;
  out.allowed = allowed;
  FillLogitsMasks(*lp_pool_, processors_, mask_jobs_, &mask_groups_, limits_.vocab_size, &out);
  for (LpMaskGroup& g : mask_groups_) {
    SeqState& s = *static_cast<SeqState*>(g.owner);
    if (!g.error.ok() && s.mask_error.ok()) s.mask_error = g.error;
  }
  // The rows' group index becomes where the group's tokens went: a bitmask, a sparse list,
  // or (a group that failed; its request fails after the step) neither.
  for (SamplingRow& r : sampler_->sampling_rows()) {
    if (r.mask_row < 0) continue;
    const LpMaskGroup& g = mask_groups_[static_cast<size_t>(r.mask_row)];
    r.mask_row = g.mask;
    r.allowed_begin = g.allowed_begin;
    r.allowed_end = g.allowed_end;
  }
  sampler_->SetFilled(out.num_masks, out.num_allowed);
  stats_.logits_masks += static_cast<int64_t>(mask_groups_.size());
}

StatusOr<std::shared_ptr<structured::Grammar>> Generator::CompileConstraint(
    const structured::ConstraintSpec& spec) const {
  std::shared_ptr<structured::GrammarCache> cache;
  {
    std::lock_guard<std::mutex> lock(structured_mu_);
    if (!grammars_) {
      if (!bundle().tokenizer) {
        return InvalidArgument(spec.field + ": structured outputs need the model's tokenizer");
      }
      auto trie =
          structured::TokenTrie::FromTokenizer(*bundle().tokenizer, limits_.vocab_size, eos_);
      if (!trie.ok()) return InvalidArgument(spec.field + ": " + trie.status().message());
      SLUICE_LOG_INFO("structured outputs: vocabulary trie of {} tokens, {} nodes",
                      (*trie)->num_tokens(), (*trie)->num_nodes());
      grammars_ = std::make_shared<structured::GrammarCache>(
          *trie, options_.structured_cache_entries, options_.structured_cache_bytes);
    }
    cache = grammars_;
  }
  return cache->Get(spec);
}

Generator::~Generator() = default;

StatusOr<std::unique_ptr<Generator>> Generator::Load(std::shared_ptr<const ModelBundle> bundle,
                                                     const GenerationOptions& options) {
  auto g = std::unique_ptr<Generator>(new Generator());
  g->options_ = options;
  GenerationOptions& o = g->options_;
  if (options.max_num_batched_tokens < 0 || options.max_num_seqs < 0 ||
      options.kv_cache_memory < 0 || options.max_model_len < 0) {
    return InvalidArgument(
        "max_num_batched_tokens, max_num_seqs, kv_cache_memory and max_model_len must be >= 0 "
        "(0 = default)");
  }
  if (!(options.gpu_memory_utilization > 0 && options.gpu_memory_utilization <= 1)) {
    return InvalidArgument("gpu_memory_utilization must be in (0, 1]");
  }
  const ModelBundle& b = *bundle;
  if (b.arch->head != HeadKind::kLanguageModel) {
    return FailedPrecondition(b.arch->name + " has no language-model head; it cannot generate");
  }
  RunnerOptions ro;
  ro.dtype = options.dtype;
  ro.backend = options.backend;
  ro.backend.cpu_few_rows = true;  // decode-bound (BackendOptions)
  ro.profile = options.profile;
  ro.activation_residual = options.activation_residual;
  ro.lm_head = true;
  ASSIGN_OR_RETURN(g->runner_, ModelRunner::Create(bundle, ro));
  Model& model = g->runner_->model();
  Backend& backend = g->runner_->backend();
  if (!model.SupportsKvCache()) {
    return FailedPrecondition(b.arch->name + " does not support generation (no KV cache)");
  }
  const bool gpu = backend.kind() == DeviceKind::kCuda;
  if (o.max_num_batched_tokens == 0) {
    o.max_num_batched_tokens = gpu ? kCudaMaxBatchedTokens : kCpuMaxBatchedTokens;
  }
  if (o.max_num_seqs == 0) o.max_num_seqs = gpu ? kCudaMaxGenSeqs : kCpuMaxGenSeqs;
  const int model_len = model.max_sequence_length();
  if (o.max_model_len == 0) o.max_model_len = model_len;
  if (model_len > 0 && o.max_model_len > model_len) {
    return InvalidArgument("--max-model-len " + std::to_string(o.max_model_len) +
                           " is over the model's max_position_embeddings of " +
                           std::to_string(model_len));
  }

  // Size the workspaces first (one forward over the step's token budget and the logits of
  // max_num_seqs rows), so that the KV cache takes what memory is left.
  if (gpu) {
    ForwardBatch fb;
    const int64_t len = std::min<int64_t>(o.max_num_batched_tokens, o.max_model_len);
    for (int64_t done = 0; done < o.max_num_batched_tokens; done += len) {
      fb.Add(std::vector<int32_t>(
          static_cast<size_t>(std::min<int64_t>(len, o.max_num_batched_tokens - done)), 0));
    }
    for (int s = 0; s < std::min(o.max_num_seqs, static_cast<int>(fb.num_tokens())); ++s) {
      fb.output_rows.push_back(s);
    }
    HostBuffer staging;
    ASSIGN_OR_RETURN(RunnerForward f, g->runner_->Run(fb, OutputRows::kNone, &staging));
    Tensor logits =
        g->runner_->workspace().Get(2100, DType::kF32, o.max_num_seqs, b.config.vocab_size);
    Tensor rows = f.hidden.RowSlice(0, std::min<int64_t>(f.hidden.rows, o.max_num_seqs));
    RETURN_IF_ERROR(model.Logits(rows, logits.RowSlice(0, rows.rows)));
    backend.Synchronize();
  }
  const DType kv_dtype = backend.ActivationDType(g->runner_->compute_dtype());
  const int64_t block_bytes = KvCache::BlockBytes(model.num_layers(), model.kv_dim(), kv_dtype);
  int64_t bytes = o.kv_cache_memory;
  if (bytes == 0 && gpu) {
    const int64_t total = backend.DeviceMemoryTotal(), free = backend.DeviceMemoryFree();
    const int64_t used = total - free;
    bytes = static_cast<int64_t>(o.gpu_memory_utilization * static_cast<double>(total)) - used;
    if (bytes <= 0) {
      return Status(StatusCode::kResourceExhausted,
                    "no device memory left for the KV cache: " + std::to_string(used >> 20) +
                        " MiB of " + std::to_string(total >> 20) +
                        " MiB in use, --gpu-memory-utilization " +
                        std::to_string(o.gpu_memory_utilization));
    }
  } else if (bytes == 0) {
    bytes = kCpuKvCacheBytes;
  }
  const int64_t blocks = bytes / block_bytes - 1;  // one block is the padding sink
  const int64_t tokens = blocks * kKvBlockSize;
  if (tokens < o.max_model_len) {
    return Status(
        StatusCode::kResourceExhausted,
        "the KV cache of " + std::to_string(bytes >> 20) + " MiB holds " + std::to_string(blocks) +
            " blocks = " + std::to_string(tokens) + " tokens (" + std::to_string(block_bytes) +
            " bytes per block of " + std::to_string(kKvBlockSize) +
            " tokens), less than one sequence of --max-model-len " +
            std::to_string(o.max_model_len) +
            "; raise --kv-cache-memory or --gpu-memory-utilization, or lower --max-model-len");
  }
  if (blocks > std::numeric_limits<int32_t>::max() / kKvBlockSize) {
    return InvalidArgument("KV cache too large: " + std::to_string(blocks) + " blocks");
  }
  g->pool_ = std::make_unique<BlockPool>(static_cast<int>(blocks), o.prefix_caching);
  g->kv_ = std::make_unique<KvCache>(&backend, model.num_layers(), model.kv_dim(), kv_dtype,
                                     static_cast<int>(blocks));
  SLUICE_LOG_INFO(
      "KV cache: {} blocks of {} tokens, {} MiB ({}), {} tokens = {:.1f} sequences of "
      "max-model-len {}; prefix caching {}",
      blocks, kKvBlockSize, g->kv_->bytes() >> 20, DTypeName(kv_dtype), tokens,
      static_cast<double>(tokens) / o.max_model_len, o.max_model_len,
      o.prefix_caching ? "on" : "off");
  if (gpu && o.cuda_graphs && !o.profile) {
    Status st =
        g->runner_->CaptureDecodeGraphs(o.max_num_seqs, o.max_model_len, &g->kv_->tensors());
    if (!st.ok()) {
      SLUICE_LOG_WARN("CUDA graphs for decode off: {}", st.message());
      g->runner_->DropGraphs();
    }
  }
  g->scheduler_ = std::make_unique<GenScheduler>(
      g->pool_.get(), GenSchedulerLimits{o.max_num_batched_tokens, o.max_num_seqs});
  g->sampler_ = std::make_unique<Sampler>(g->runner_.get());
  g->done_ = backend.CreateFence();
  g->forward_done_ = backend.CreateFence();
  g->eos_ = b.DefaultStopTokenIds();
  // Logits processors: structured outputs first, then one instance of each plugin's.
  {
    auto wrap = [&](std::unique_ptr<LogitsProcessor> p) {
      return o.wrap_processor ? o.wrap_processor(std::move(p)) : std::move(p);
    };
    g->processors_.push_back(wrap(MakeStructuredProcessor(o.max_num_seqs)));
    if (o.plugins) {
      for (const auto& f : o.plugins->processors()) {
        ASSIGN_OR_RETURN(auto p, f->Create(b.config.vocab_size, o.max_num_seqs));
        g->processors_.push_back(wrap(std::move(p)));
      }
    }
    for (auto& p : g->processors_) {
      g->lp_rows_.push_back(std::make_unique<LogitsRows>(p.get(), o.max_num_seqs));
    }
    g->lp_partial_.resize(g->processors_.size());
    int threads =
        o.logits_threads > 0 ? o.logits_threads : std::min(16, ThreadPool::HardwareThreads());
    // Called once per step: the caller spins for its workers instead of sleeping.
    g->lp_pool_ = std::make_unique<ThreadPool>(std::max(1, threads), /*spin_us=*/20);
  }
  GenerationLimits& l = g->limits_;
  l.vocab_size = b.config.vocab_size;
  l.max_model_len = o.max_model_len;
  l.max_kv_tokens = tokens;
  l.has_tokenizer = b.tokenizer != nullptr;
  return g;
}

Status Generator::Add(std::shared_ptr<GenerateRequest> request) {
  GenerateRequest& r = *request;
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= limits_.vocab_size) {
      return InvalidArgument("prompt token " + std::to_string(i) + ": id " +
                             std::to_string(r.prompt[i]) + " outside the vocabulary [0, " +
                             std::to_string(limits_.vocab_size) + ")");
    }
  }
  RETURN_IF_ERROR(ValidateGeneration(r.params, r.prompt.size(), limits_));
  if (r.params.constraint && !r.params.grammar) {
    ASSIGN_OR_RETURN(r.params.grammar, CompileConstraint(*r.params.constraint));
  }
  RETURN_IF_ERROR(SelectProcessors(r));
  const SamplingParams& p = r.params;
  r.arrival = SteadyClock::now();
  r.outputs.assign(static_cast<size_t>(p.n), CompletionOutput{});
  r.prompt_logprobs.clear();
  r.done = false;
  const uint64_t seed = p.seed ? *p.seed : SplitMix(seed_state_++);
  auto s = std::make_unique<SeqState>();
  s->request = request;
  s->seed = SplitMix(seed);
  s->rs = ResolveSampling(p, bundle().generation, r.prompt.size(), limits_.max_model_len);
  s->seq.tokens = r.prompt;
  s->seq.prompt_len = static_cast<int>(r.prompt.size());
  s->seq.use_prefix_cache = !p.prompt_logprobs.has_value();
  s->seq.owner = s.get();
  s->fork_pending = p.n > 1;
  if (p.grammar) {
    s->grammar = p.grammar;
    s->gstate = p.grammar->start();
  }
  AttachProcessors(*s);
  if (s->rs.repetition_penalty != 1.f) {
    s->prompt_set = r.prompt;
    std::sort(s->prompt_set.begin(), s->prompt_set.end());
    s->prompt_set.erase(std::unique(s->prompt_set.begin(), s->prompt_set.end()),
                        s->prompt_set.end());
  }
  if (p.detokenize && bundle().tokenizer) {
    s->detok = std::make_unique<DecodeStream>(bundle().tokenizer.get(), p.skip_special_tokens);
  }
  scheduler_->Add(&s->seq);
  seqs_.push_back(std::move(s));
  active_.push_back(std::move(request));
  return Status::Ok();
}

void Generator::Finish(SeqState& s, const char* reason) {
  s.out().finish_reason = reason;
  s.finished = true;
  scheduler_->Remove(&s.seq);
  DetachProcessors(s);
}

void Generator::CompleteRequest(GenerateRequest& r, const Status& status) {
  r.finished = SteadyClock::now();
  r.done = true;
  std::shared_ptr<GenerateRequest> hold;
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if (it->get() == &r) {
      hold = std::move(*it);
      active_.erase(it);
      break;
    }
  }
  seqs_.erase(std::remove_if(seqs_.begin(), seqs_.end(),
                             [&](const std::unique_ptr<SeqState>& s) {
                               if (s->request.get() != &r) return false;
                               if (!s->finished) scheduler_->Remove(&s->seq);
                               DetachProcessors(*s);
                               return true;
                             }),
              seqs_.end());
  ++stats_.requests_finished;
  if (r.sink.on_done) r.sink.on_done(r, status);
}

void Generator::Abort(GenerateRequest& r) {
  if (r.done) return;
  for (auto& s : seqs_) {
    if (s->request.get() == &r && !s->finished) Finish(*s, "abort");
  }
  for (CompletionOutput& o : r.outputs) {
    if (o.finish_reason.empty()) o.finish_reason = "abort";
  }
  CompleteRequest(r, Status(StatusCode::kUnavailable, "request cancelled"));
}

void Generator::AbortAll() {
  while (!active_.empty()) {
    std::shared_ptr<GenerateRequest> r = active_.front();
    Abort(*r);
  }
}

void Generator::Fail(const std::vector<StepItem>& items, const Status& st) {
  std::vector<GenerateRequest*> failed;
  for (const StepItem& it : items) {
    GenerateRequest* r = static_cast<SeqState*>(it.seq->owner)->request.get();
    if (std::find(failed.begin(), failed.end(), r) == failed.end()) failed.push_back(r);
  }
  for (GenerateRequest* r : failed) {
    for (auto& s : seqs_) {
      if (s->request.get() == r && !s->finished) Finish(*s, "abort");
    }
    CompleteRequest(*r, Status(StatusCode::kInternal, "generation step failed: " + st.message()));
  }
}

bool Generator::Accept(SeqState& s, const SampledToken& t, double now_s) {
  GenerateRequest& r = *s.request;
  const SamplingParams& p = r.params;
  CompletionOutput& out = s.out();
  s.seq.tokens.push_back(t.token);
  out.token_ids.push_back(t.token);
  s.out_view.ids = out.token_ids.data();
  s.out_view.size = static_cast<int64_t>(out.token_ids.size());
  out.token_times.push_back(now_s);
  if (p.logprobs) {
    TokenLogprobs lp;
    lp.logprob = t.logprob;
    for (int k = 0; k < t.num_top; ++k) lp.top.emplace_back(t.top_ids[k], t.top_logprobs[k]);
    out.logprobs.push_back(std::move(lp));
  }
  ++s.output_counts[t.token];
  ++stats_.generated_tokens;
  if (r.first_token == SteadyClock::time_point{}) r.first_token = SteadyClock::now();
  const int n_out = static_cast<int>(out.token_ids.size());
  const bool checks = n_out >= p.min_tokens;
  bool stop = false;
  bool grammar_done = false;  // the constraint allows nothing more
  if (s.grammar && !s.grammar->trie().IsEos(t.token)) {
    s.gstate = s.grammar->Advance(s.gstate, t.token);
    if (s.gstate < 0) {
      s.mask_error = Internal("structured output: token " + std::to_string(t.token) +
                              " was sampled outside the constraint's mask");
      Finish(s, "abort");
      return true;
    }
    grammar_done = s.grammar->Finished(s.gstate);
  }
  if (checks) {
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) !=
        p.stop_token_ids.end()) {
      out.stop_token = t.token;
      stop = true;
    } else if (!p.ignore_eos && std::find(eos_.begin(), eos_.end(), t.token) != eos_.end()) {
      stop = true;
    }
  }
  if (s.detok && (!stop || p.include_stop_str_in_output)) {
    auto piece = s.detok->Step(t.token);
    if (piece.ok() && piece->has_value()) {
      const size_t old_len = out.text.size();
      out.text += **piece;
      if (!stop && checks && !p.stop.empty()) {
        // The earliest stop string in the text added now (with room for one that started
        // in earlier text).
        size_t best = std::string::npos, best_len = 0;
        std::string_view best_str;
        for (const std::string& st : p.stop) {
          const size_t from = old_len >= st.size() - 1 ? old_len - (st.size() - 1) : 0;
          const size_t pos = out.text.find(st, from);
          if (pos != std::string::npos && pos < best) {
            best = pos;
            best_len = st.size();
            best_str = st;
          }
        }
        if (best != std::string::npos) {
          out.text.resize(p.include_stop_str_in_output ? best + best_len : best);
          out.stop_string = std::string(best_str);
          stop = true;
        }
      }
    }
  }
  if (stop || grammar_done) {
    Finish(s, "stop");
    return true;
  }
  if (n_out >= s.rs.max_tokens || static_cast<int>(s.seq.tokens.size()) >= limits_.max_model_len) {
    Finish(s, "length");
    return true;
  }
  return false;
}

Status Generator::Step() {
  // Cancelled requests first: their blocks go back before the step is planned.
  for (size_t i = 0; i < active_.size();) {
    if (active_[i]->cancelled.load(std::memory_order_relaxed)) {
      Abort(*active_[i]);  // erases it from active_
      continue;
    }
    ++i;
  }
  const auto t_begin = SteadyClock::now();
  scheduler_->Schedule(&items_, &preempted_);
  stats_.preemptions = scheduler_->preemptions();
  // Logits processors: preempted sequences leave (they come back with a reset), scheduled
  // ones join; rows whose step does not sample are in partial prefill.
  const auto t_lp = SteadyClock::now();
  for (GenSequence* q : preempted_) DetachProcessors(*static_cast<SeqState*>(q->owner));
  preempted_.clear();
  for (auto& v : lp_partial_) v.clear();
  for (const StepItem& it : items_) {
    SeqState& s = *static_cast<SeqState*>(it.seq->owner);
    for (LpSlot& slot : s.lps) {
      if (slot.row < 0 && !slot.pending) lp_rows_[static_cast<size_t>(slot.proc)]->Add(&slot);
      if (!it.sample) lp_partial_[static_cast<size_t>(slot.proc)].push_back(&slot);
    }
  }
  for (size_t i = 0; i < lp_rows_.size(); ++i) lp_rows_[i]->Flush(lp_partial_[i]);
  mask_jobs_.clear();
  mask_groups_.clear();
  stats_.logits_s += Seconds(t_lp, SteadyClock::now());
  if (items_.empty()) {
    if (HasWork() && scheduler_->num_running() == 0) {
      return Internal("generation: requests are waiting but none can be scheduled");
    }
    return Status::Ok();
  }
  ++stats_.steps;

  // The packed batch: each item's tokens, their cache slots and block tables, and the rows
  // the sampler reads (prompt-logprob rows and sampling rows).
  batch_.Clear();
  int max_blocks = 0;
  const auto step_start = SteadyClock::now();
  for (const StepItem& it : items_) {
    max_blocks = std::max(max_blocks, static_cast<int>(it.seq->blocks.size()));
    GenerateRequest& req = *static_cast<SeqState*>(it.seq->owner)->request;
    if (req.scheduled == SteadyClock::time_point{}) req.scheduled = step_start;
  }
  batch_.kv_blocks_per_seq = max_blocks;
  std::vector<SamplingRow>& rows = sampler_->sampling_rows();
  std::vector<SamplingAdjust>& adjusts = sampler_->adjusts();
  rows.clear();
  adjusts.clear();
  struct RowUse {
    SeqState* s;
    int prompt_pos;  // >= 1: a prompt-logprob row for this prompt position; 0: a sample
    int child;       // for samples: which of the n outputs (fork rows)
  };
  std::vector<RowUse> uses;
  std::unordered_map<int32_t, SamplingAdjust> adj;
  for (const StepItem& it : items_) {
    SeqState& s = *static_cast<SeqState*>(it.seq->owner);
    GenSequence& q = *it.seq;
    const int base = static_cast<int>(batch_.token_ids.size());
    batch_.AddWithPrefix(q.tokens.data() + it.start, it.len, -1);
    batch_.prefix_of.clear();
    batch_.kv_start.push_back(it.start);
    for (int j = 0; j < it.len; ++j) {
      const int pos = it.start + j;
      batch_.kv_slots.push_back(q.blocks[pos / kKvBlockSize] * kKvBlockSize + pos % kKvBlockSize);
    }
    for (int b = 0; b < max_blocks; ++b) {
      batch_.kv_block_table.push_back(b < static_cast<int>(q.blocks.size()) ? q.blocks[b] : 0);
    }
    stats_.prompt_tokens += std::max(0, std::min(it.start + it.len, q.prompt_len) - it.start);
    const SamplingParams& p = s.request->params;
    // Prompt logprobs: position pp's row is token pp - 1's.
    if (p.prompt_logprobs && s.index == 0) {
      const int first = std::max(it.start + 1, s.prompt_logprob_next);
      const int last = std::min(it.start + it.len, q.prompt_len - 1);
      for (int pp = first; pp <= last; ++pp) {
        batch_.output_rows.push_back(base + (pp - 1 - it.start));
        SamplingRow r;
        r.forced_token = q.tokens[pp];
        r.num_logprobs = *p.prompt_logprobs;
        rows.push_back(r);
        uses.push_back({&s, pp, 0});
      }
      if (last >= first) s.prompt_logprob_next = last + 1;
    }
    if (!it.sample) continue;
    const int n_rows = s.fork_pending ? p.n : 1;
    const int n_out = static_cast<int>(s.out().token_ids.size());
    // Adjustments: repetition penalty over prompt and output tokens, presence/frequency
    // over output tokens, logit_bias, and stop tokens masked before min_tokens.
    adj.clear();
    auto at = [&](int32_t t) -> SamplingAdjust& {
      SamplingAdjust& a = adj[t];
      a.token = t;
      return a;
    };
    const bool rep = s.rs.repetition_penalty != 1.f;
    if (rep) {
      for (int32_t t : s.prompt_set) at(t).repeat = 1;
    }
    for (const auto& [t, c] : s.output_counts) {
      if (rep) at(t).repeat = 1;
      if (p.presence_penalty != 0.f || p.frequency_penalty != 0.f) {
        at(t).add -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
      }
    }
    for (const auto& [t, bias] : p.logit_bias) at(t).add += bias;
    if (n_out < p.min_tokens) {
      const float inf = std::numeric_limits<float>::infinity();
      for (int32_t t : p.stop_token_ids) at(t).add = -inf;
      if (!p.ignore_eos) {
        for (int t : eos_) at(t).add = -inf;
      }
    }
    const int adj_begin = static_cast<int>(adjusts.size());
    for (const auto& [t, a] : adj) adjusts.push_back(a);
    std::sort(adjusts.begin() + adj_begin, adjusts.end(),
              [](const SamplingAdjust& a, const SamplingAdjust& b) { return a.token < b.token; });
    // The allowed tokens from the sequence's logits processors (the same for fork rows),
    // filled after the forward is launched; argmax-invariant ones skip greedy rows.
    int mask_row = -1;
    if (!s.lps.empty()) {
      const bool greedy = s.rs.temperature == 0.f && !p.logprobs;
      const int first = static_cast<int>(mask_jobs_.size());
      for (const LpSlot& slot : s.lps) {
        if (greedy && processors_[static_cast<size_t>(slot.proc)]->argmax_invariant()) continue;
        mask_jobs_.push_back({slot.proc, slot.row});
      }
      if (static_cast<int>(mask_jobs_.size()) > first) {
        mask_row = static_cast<int>(mask_groups_.size());
        mask_groups_.push_back({&s, first, static_cast<int>(mask_jobs_.size()), Status::Ok()});
      }
    }
    for (int c = 0; c < n_rows; ++c) {
      batch_.output_rows.push_back(base + it.len - 1);
      SamplingRow r;
      r.mask_row = mask_row;
      r.temperature = s.rs.temperature;
      r.top_k = s.rs.top_k;
      r.top_p = s.rs.top_p;
      r.min_p = s.rs.min_p;
      r.repetition_penalty = s.rs.repetition_penalty;
      r.seed = c == 0 ? s.seed : SplitMix(s.seed ^ (0xC0FFEEull + static_cast<uint64_t>(c)));
      r.counter = static_cast<uint64_t>(n_out);
      r.num_logprobs = p.logprobs ? *p.logprobs : 0;
      r.adjust_begin = adj_begin;
      r.adjust_end = static_cast<int>(adjusts.size());
      rows.push_back(r);
      uses.push_back({&s, 0, c});
    }
  }

  stats_.batched_tokens += static_cast<int64_t>(batch_.token_ids.size());
  const auto t_launch = SteadyClock::now();
  auto t_wait = t_launch;
  Status st = [&]() -> Status {
    ASSIGN_OR_RETURN(RunnerForward f,
                     runner_->Run(batch_, OutputRows::kNone, &staging_, &kv_->tensors()));
    // The masks, while the device runs the forward (where the backend queues it).
    const int words = (limits_.vocab_size + 31) / 32;
    // Room for a bitmask or a sparse list (at most `words` ids) per group.
    const int groups = static_cast<int>(mask_groups_.size());
    uint32_t* masks = sampler_->PrepareMasks(groups, words, /*slot=*/0);
    const bool sparse = std::any_of(processors_.begin(), processors_.end(),
                                    [](const auto& lp) { return lp->has_allowed(); });
    int32_t* allowed = sampler_->PrepareAllowed(sparse ? groups * words : 0, /*slot=*/0);
    if (!mask_groups_.empty()) {
      const auto t_fill = SteadyClock::now();
      forward_done_->Record();
      FillMasks(masks, allowed);
      sampler_->StageMasks(/*slot=*/0);  // uploaded while the forward runs
      const double fill_s = Seconds(t_fill, SteadyClock::now());
      stats_.logits_s += fill_s;
      ++stats_.mask_steps;
      if (runner_->backend().asynchronous() && forward_done_->Done()) {
        ++stats_.mask_bound_steps;
        stats_.mask_bound_s += fill_s;
      }
    }
    RETURN_IF_ERROR(sampler_->Enqueue(batch_, f, 0));
    done_->Record();
    t_wait = SteadyClock::now();
    done_->Wait();
    return Status::Ok();
  }();
  const auto t_apply = SteadyClock::now();
  stats_.prepare_s += Seconds(t_begin, t_launch);
  stats_.launch_s += Seconds(t_launch, t_wait);
  stats_.wait_s += Seconds(t_wait, t_apply);
  if (!st.ok()) {
    SLUICE_LOG_ERROR("generation step of {} sequences failed: {}", items_.size(), st.message());
    Fail(items_, st);
    return st;
  }
  scheduler_->Commit(items_);

  // Results in row order: prompt logprobs, then tokens (forks create their children).
  const SampledToken* res = sampler_->results(0);
  const auto now = SteadyClock::now();
  std::vector<GenerateRequest*> touched;
  std::vector<int32_t> copy_src, copy_dst;
  for (size_t i = 0; i < uses.size(); ++i) {
    SeqState& s = *uses[i].s;
    GenerateRequest& r = *s.request;
    if (std::find(touched.begin(), touched.end(), &r) == touched.end()) touched.push_back(&r);
    if (uses[i].prompt_pos > 0) {
      TokenLogprobs lp;
      lp.logprob = res[i].logprob;
      for (int k = 0; k < res[i].num_top; ++k) {
        lp.top.emplace_back(res[i].top_ids[k], res[i].top_logprobs[k]);
      }
      r.prompt_logprobs.push_back(std::move(lp));
      continue;
    }
    const double t_s = Seconds(r.arrival, now);
    if (uses[i].child == 0) {
      if (s.fork_pending) {
        // Children 1..n-1 share the prompt's blocks (the partial last block copied) and
        // take their first token from their own rows of this step.
        s.fork_pending = false;
        for (int c = 1; c < r.params.n; ++c) {
          auto child = std::make_unique<SeqState>();
          child->request = s.request;
          child->index = c;
          child->seed = rows[i + c].seed;
          child->rs = s.rs;
          child->prompt_set = s.prompt_set;
          child->grammar = s.grammar;
          child->gstate = s.gstate;
          child->seq.tokens.assign(s.seq.tokens.begin(), s.seq.tokens.begin() + s.seq.prompt_len);
          child->seq.prompt_len = s.seq.prompt_len;
          child->seq.use_prefix_cache = s.seq.use_prefix_cache;
          child->seq.owner = child.get();
          child->prompt_logprob_next = s.seq.prompt_len;
          if (s.detok) {
            child->detok = std::make_unique<DecodeStream>(bundle().tokenizer.get(),
                                                          r.params.skip_special_tokens);
          }
          int src, dst;
          if (scheduler_->Fork(&s.seq, &child->seq, &src, &dst) && src >= 0) {
            copy_src.push_back(src);
            copy_dst.push_back(dst);
          }
          SeqState& cs = *child;
          AttachProcessors(cs);
          seqs_.push_back(std::move(child));
          Accept(cs, res[i + c], t_s);
        }
      }
      Accept(s, res[i], t_s);
    }
  }
  if (!copy_src.empty()) {
    KvCopyParams cp;
    cp.caches = &kv_->tensors();
    cp.src = copy_src.data();
    cp.dst = copy_dst.data();
    cp.num_blocks = static_cast<int>(copy_src.size());
    cp.block_size = kKvBlockSize;
    runner_->backend().CopyKvBlocks(cp);
  }
  // Deliveries: progress to every request that moved, completion to those now done.
  for (GenerateRequest* r : touched) {
    // A constraint that failed (its automaton outgrew its limit) fails its request.
    Status err;
    for (auto& sp : seqs_) {
      if (sp->request.get() == r && !sp->mask_error.ok()) {
        err = sp->mask_error;
        if (!sp->finished) Finish(*sp, "abort");
      }
    }
    if (r->sink.on_output) r->sink.on_output(*r);
    bool all = true;
    for (const CompletionOutput& o : r->outputs) all &= !o.finish_reason.empty();
    if (!err.ok()) {
      for (CompletionOutput& o : r->outputs) {
        if (o.finish_reason.empty()) o.finish_reason = "abort";
      }
      CompleteRequest(*r, err);
    } else if (all) {
      CompleteRequest(*r, Status::Ok());
    }
  }
  stats_.apply_s += Seconds(t_apply, SteadyClock::now());
  return Status::Ok();
}

}  // namespace sluice
