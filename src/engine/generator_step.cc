// Generator::Step: one engine step for every active sequence (schedule, logits processors,
// forward, sampling, acceptance, delivery).
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/log.h"
#include "engine/generator.h"
#include "engine/generator_internal.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

using generator_internal::Seconds;
using generator_internal::SplitMix;

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
