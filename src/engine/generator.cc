#include "engine/generator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/log.h"
#include "engine/generator_internal.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace {

// Default step limits per device (GenerationOptions 0 = these).
constexpr int64_t kCpuMaxBatchedTokens = 2048, kCudaMaxBatchedTokens = 16384;
constexpr int kCpuMaxGenSeqs = 64, kCudaMaxGenSeqs = 512;
constexpr int64_t kCpuKvCacheBytes = 2ll << 30;

using generator_internal::SplitMix;

}  // namespace

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

}  // namespace sluice
