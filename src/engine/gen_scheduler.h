// The generation scheduler: which sequences run in the next step, and how many of their
// tokens. One step packs the decode token of every running sequence and chunks of prompts
// (chunked prefill) under max_num_batched_tokens and max_num_seqs, oldest sequences first.
// Blocks come from the BlockPool: a sequence is admitted when the blocks its chunk needs are
// free (keeping a small watermark), and when a running sequence needs a block and none is
// free, the newest running sequences are preempted (their blocks released, their tokens
// kept; they return to the front of the queue and are recomputed on resume, hitting the
// prefix cache where their blocks survived). A new sequence first takes the cached blocks
// that hold its prompt's leading full blocks (automatic prefix caching).
//
// Not thread-safe: the generation engine's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/kv_cache.h"

namespace sluice {

// One sequence being generated (the scheduler's and the KV cache's view of it).
struct GenSequence {
  std::vector<int32_t> tokens;  // prompt, then output tokens
  int prompt_len = 0;
  int num_computed = 0;          // leading tokens whose keys/values are in the cache
  std::vector<int32_t> blocks;   // block table
  int num_published = 0;         // leading full blocks published to the prefix cache
  uint64_t last_hash = 0;        // hash chain up to block num_published - 1
  bool use_prefix_cache = true;  // false when prompt logprobs must be computed
  uint64_t order = 0;            // admission order: preemption takes the newest first
  bool running = false;
  void* owner = nullptr;  // the engine's per-sequence state
};

// A sequence's work in one step: tokens [start, start + len) run; `sample` when they reach
// the end of its known tokens (the step produces its next token).
struct StepItem {
  GenSequence* seq = nullptr;
  int start = 0;
  int len = 0;
  bool sample = false;
};

struct GenSchedulerLimits {
  int64_t max_num_batched_tokens = 2048;
  int max_num_seqs = 256;
};

class GenScheduler {
 public:
  GenScheduler(BlockPool* pool, GenSchedulerLimits limits);

  // Queues a sequence (waiting, nothing computed).
  void Add(GenSequence* seq);
  // Takes a sequence out (finished or cancelled): releases its blocks at once.
  void Remove(GenSequence* seq);
  // A sequence forked from `parent` after its prompt ran (n > 1): shares parent's full
  // blocks; gets a new block for the partial last one, which the caller copies from
  // parent's (copy_src -> copy_dst; both -1 when the prompt fills whole blocks). When no
  // block is free the child waits and recomputes its prompt instead (false).
  bool Fork(GenSequence* parent, GenSequence* child, int* copy_src, int* copy_dst);

  // Plans the next step into `items` (cleared first). Sequences preempted to make room are
  // appended to `preempted`.
  void Schedule(std::vector<StepItem>* items, std::vector<GenSequence*>* preempted);
  // After a step ran: marks the items' tokens computed and publishes newly full blocks.
  void Commit(const std::vector<StepItem>& items);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool empty() const { return waiting_.empty() && running_.empty(); }
  int64_t preemptions() const { return preemptions_; }
  const GenSchedulerLimits& limits() const { return limits_; }

 private:
  // Gives seq the blocks for its first `tokens` tokens; false (nothing allocated) if the
  // pool cannot (keeping `reserve` blocks free).
  bool EnsureBlocks(GenSequence* seq, int tokens, int reserve);
  void ReleaseBlocks(GenSequence* seq);
  void Preempt(GenSequence* seq);
  // A new sequence's leading prompt blocks from the prefix cache.
  void TakeCachedPrefix(GenSequence* seq);

  BlockPool* pool_;
  GenSchedulerLimits limits_;
  std::deque<GenSequence*> waiting_;
  std::vector<GenSequence*> running_;  // admission order
  uint64_t next_order_ = 0;
  int64_t preemptions_ = 0;
  int watermark_ = 0;
};

}  // namespace sluice
