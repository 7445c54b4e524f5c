#include "engine/gen_scheduler.h"

#include <algorithm>

namespace sluice {

namespace {
int BlocksFor(int tokens) { return (tokens + kKvBlockSize - 1) / kKvBlockSize; }
}  // namespace

GenScheduler::GenScheduler(BlockPool* pool, GenSchedulerLimits limits)
    : pool_(pool), limits_(limits), watermark_(std::max(1, pool->num_blocks() / 100)) {}

void GenScheduler::Add(GenSequence* seq) {
  seq->order = next_order_++;
  seq->running = false;
  waiting_.push_back(seq);
}

void GenScheduler::ReleaseBlocks(GenSequence* seq) {
  for (auto it = seq->blocks.rbegin(); it != seq->blocks.rend(); ++it) pool_->Release(*it);
  seq->blocks.clear();
  seq->num_computed = 0;
  seq->num_published = 0;
  seq->last_hash = 0;
}

void GenScheduler::Remove(GenSequence* seq) {
  if (seq->running) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  seq->running = false;
  ReleaseBlocks(seq);
}

bool GenScheduler::EnsureBlocks(GenSequence* seq, int tokens, int reserve) {
  const int need = BlocksFor(tokens) - static_cast<int>(seq->blocks.size());
  if (need <= 0) return true;
  if (pool_->available() - need < reserve) return false;
  for (int i = 0; i < need; ++i) seq->blocks.push_back(*pool_->Allocate());
  return true;
}

void GenScheduler::Preempt(GenSequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  seq->running = false;
  ReleaseBlocks(seq);
  waiting_.push_front(seq);
  ++preemptions_;
}

void GenScheduler::TakeCachedPrefix(GenSequence* seq) {
  if (!pool_->prefix_caching() || !seq->use_prefix_cache || !seq->blocks.empty()) return;
  // Full blocks only, and never the block holding the last known token: that token must run
  // to produce the next token's logits.
  const int full = (static_cast<int>(seq->tokens.size()) - 1) / kKvBlockSize;
  int hit = 0;
  for (int b = 0; b < full; ++b) {
    std::span<const int32_t> t(seq->tokens.data() + b * kKvBlockSize, kKvBlockSize);
    auto block = pool_->Lookup(seq->last_hash, t);
    if (!block) break;
    seq->blocks.push_back(*block);
    seq->last_hash = BlockHash(seq->last_hash, t);
    seq->num_published = b + 1;
    seq->num_computed = (b + 1) * kKvBlockSize;
    ++hit;
  }
  pool_->CountQuery(static_cast<int64_t>(full) * kKvBlockSize,
                    static_cast<int64_t>(hit) * kKvBlockSize);
}

void GenScheduler::Schedule(std::vector<StepItem>* items, std::vector<GenSequence*>* preempted) {
  items->clear();
  int64_t budget = limits_.max_num_batched_tokens;
  int seqs = 0;
  bool preempting = false;
  for (size_t i = 0; i < running_.size() && budget > 0 && seqs < limits_.max_num_seqs;) {
    GenSequence* seq = running_[i];
    const int need = static_cast<int>(seq->tokens.size()) - seq->num_computed;
    const int len = static_cast<int>(std::min<int64_t>(need, budget));
    bool scheduled = true;
    while (!EnsureBlocks(seq, seq->num_computed + len, 0)) {
      GenSequence* victim = running_.back();
      preempted->push_back(victim);
      Preempt(victim);
      preempting = true;
      if (victim == seq) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;  // seq was the newest: nothing after it runs either
    items->push_back({seq, seq->num_computed, len,
                      seq->num_computed + len == static_cast<int>(seq->tokens.size())});
    budget -= len;
    ++seqs;
    ++i;
  }
  // New sequences only when nothing had to be preempted (they would take the room back).
  while (!preempting && !waiting_.empty() && budget > 0 && seqs < limits_.max_num_seqs) {
    GenSequence* seq = waiting_.front();
    TakeCachedPrefix(seq);
    const int need = static_cast<int>(seq->tokens.size()) - seq->num_computed;
    const int len = static_cast<int>(std::min<int64_t>(need, budget));
    if (!EnsureBlocks(seq, seq->num_computed + len, watermark_)) {
      ReleaseBlocks(seq);  // cached prefix blocks go back (they stay cached)
      break;
    }
    waiting_.pop_front();
    seq->running = true;
    running_.push_back(seq);
    items->push_back({seq, seq->num_computed, len,
                      seq->num_computed + len == static_cast<int>(seq->tokens.size())});
    budget -= len;
    ++seqs;
  }
}

void GenScheduler::Commit(const std::vector<StepItem>& items) {
  for (const StepItem& it : items) {
    GenSequence* seq = it.seq;
    seq->num_computed = it.start + it.len;
    while ((seq->num_published + 1) * kKvBlockSize <= seq->num_computed) {
      const int b = seq->num_published;
      std::span<const int32_t> t(seq->tokens.data() + b * kKvBlockSize, kKvBlockSize);
      pool_->Publish(seq->blocks[b], seq->last_hash, t);
      seq->last_hash = BlockHash(seq->last_hash, t);
      ++seq->num_published;
    }
  }
}

bool GenScheduler::Fork(GenSequence* parent, GenSequence* child, int* copy_src, int* copy_dst) {
  *copy_src = *copy_dst = -1;
  child->order = next_order_++;
  const int full = parent->num_computed / kKvBlockSize;
  const bool partial = parent->num_computed % kKvBlockSize != 0;
  if (partial && pool_->available() < 1) {
    child->running = false;
    waiting_.push_back(child);
    return false;
  }
  for (int b = 0; b < full; ++b) {
    pool_->Retain(parent->blocks[b]);
    child->blocks.push_back(parent->blocks[b]);
  }
  if (partial) {
    const int nb = *pool_->Allocate();
    *copy_src = parent->blocks[full];
    *copy_dst = nb;
    child->blocks.push_back(nb);
  }
  // The parent publishes computed full blocks only, so its chain covers the shared blocks.
  child->num_computed = parent->num_computed;
  child->num_published = parent->num_published;
  child->last_hash = parent->last_hash;
  child->running = true;
  running_.push_back(child);
  return true;
}

}  // namespace sluice
