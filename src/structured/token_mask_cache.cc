// Grammar (token_mask.h): the per-state mask cache (LRU under cache_mu_, fast keys), the
// canonical states of counted runs (which states share a mask), and the state queries
// (Advance, Accepting, Finished, ...). The mask walks are in token_mask.cc.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "structured/token_mask.h"

namespace sluice::structured {

Grammar::Canon Grammar::Canonical(int32_t s, bool shared, bool* ok) {
  if (ok) *ok = true;
  if (counted_.empty() || s < 0) return {s, 0, false};
  const auto i = static_cast<size_t>(s);
  {
    std::lock_guard<std::mutex> lock(canon_mu_);
    if (i < canonical_.size() && canonical_[i].state != kUnknownCanonical) return canonical_[i];
  }
  std::vector<int32_t> st = pda_     ? pda_->ItemStates(s)
                            : shared ? dfa_->NfaStatesShared(s)
                                     : dfa_->NfaStates(s);
  uint64_t runs = 0;
  bool exceptions = false;
  int32_t near_run = -1;
  uint32_t near_within = 0;
  // A shift may move states into another repetition's blocks (nested ones): until none applies.
  for (int pass = 0; pass < 8; ++pass) {
    bool any = false;
    for (size_t ri = 0; ri < counted_.size(); ++ri) {
      const Nfa::Counted& c = counted_[ri].c;
      const int depth = static_cast<int>(counted_[ri].reach->depth);
      const int32_t end = c.begin + c.copies * c.stride;
      int lo = c.copies + 1, hi = 0;  // blocks of s's states: the fewest copies each can have done
      for (int32_t q : st) {
        if (q < c.begin || q >= end) continue;
        const int k = (q - c.begin) / c.stride + 1;
        lo = std::min(lo, k);
        hi = std::max(hi, k);
      }
      if (hi == 0) continue;
      // Within one token (but the Reach exceptions) a state of block k meets c_k .. c_(k+D):
      // the same exits and copies from every block of the range when all are past min and D
      // copies short of the last, or all D copies short of min.
      int target;
      bool near = false;
      if (lo >= c.min && hi + depth < c.copies) {
        target = std::max(c.min, 1);
      } else if (hi + depth < c.min) {
        target = 1;
      } else if (lo >= c.min && hi < c.copies && near_run < 0) {
        // Fewer than D copies left: a token whose prefix in the run's bytes is at most
        // copies - 1 - hi long still behaves as from the target block; the others are walked
        // from s (NearWalk).
        target = std::max(c.min, 1);
        near = true;
      } else {
        continue;
      }
      if (lo == target) continue;
      if (near) {
        near_run = static_cast<int32_t>(ri);
        near_within = static_cast<uint32_t>(c.copies - 1 - hi);
      }
      const int32_t shift = (lo - target) * c.stride;
      for (int32_t& q : st) {
        if (q >= c.begin && q < end) q -= shift;
      }
      runs |= 1ull << ri;
      exceptions |= near || !counted_[ri].reach->longer.empty();
      any = true;
    }
    if (!any) break;
  }
  Canon out{s, 0, false};
  if (runs) {
    const int32_t t = pda_     ? pda_->Remap(s, st)
                      : shared ? dfa_->InternShared(std::move(st))
                               : dfa_->Intern(std::move(st));
    if (t == Dfa::kUnknownNext) {  // (shared: no room for a new state; nothing kept)
      *ok = false;
      return out;
    }
    if (t >= 0) out = {t, runs, exceptions, near_run, near_within};
  }
  std::lock_guard<std::mutex> lock(canon_mu_);
  if (canonical_.size() <= i) canonical_.resize(i + 1);
  canonical_[i] = out;
  return out;
}

// The cached mask under key, moved to the front of the LRU (cache_mu_ held; null: none).
Grammar::MaskP Grammar::FindMaskLocked(int32_t key) {
  auto it = cache_.find(key);
  if (it == cache_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

bool Grammar::CachedMask(int32_t s, uint32_t* words) {
  MaskP m;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    m = FindMaskLocked(s);
  }
  if (!m) return false;
  std::memcpy(words, m->data(), m->size() * sizeof(uint32_t));
  return true;
}

bool Grammar::FastMask(int32_t s, uint32_t* words) {
  if (s < 0) return false;
  MaskP m;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (static_cast<size_t>(s) >= fast_key_.size()) return false;
    const int32_t key = fast_key_[static_cast<size_t>(s)];
    if (key >= 0) m = FindMaskLocked(key);
  }
  if (!m) return false;
  std::memcpy(words, m->data(), m->size() * sizeof(uint32_t));
  return true;
}

void Grammar::NoteKey(int32_t s, int32_t key) {
  if (s < 0) return;
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (fast_key_.size() <= static_cast<size_t>(s)) fast_key_.resize(static_cast<size_t>(s) + 1, -1);
  fast_key_[static_cast<size_t>(s)] = key;
}

Status Grammar::StateLimitError() {
  return Status(StatusCode::kResourceExhausted,
                "structured output: the constraint's automaton outgrew its state limit");
}

Status Grammar::StateLimit() const {
  if (!(pda_ ? pda_->overflowed() : dfa_->overflowed())) return Status::Ok();
  return StateLimitError();
}

void Grammar::CacheMask(int32_t s, const uint32_t* words) {
  const size_t n = static_cast<size_t>(trie_->words());
  auto m = std::make_shared<const std::vector<uint32_t>>(words, words + n);
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_.find(s);
  if (it != cache_.end()) {  // (computed meanwhile by another thread: the same mask)
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  if (cache_.size() >= max_cached_) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(s, std::move(m));
  cache_[s] = lru_.begin();
  CountEntries();
}

int32_t Grammar::Advance(int32_t s, int32_t t) {
  const std::string* b = trie_->bytes(t);
  if (!b || b->empty()) return kDead;
  std::lock_guard<std::shared_mutex> lock(mu_);
  return pda_ ? pda_->Run(s, *b) : dfa_->Run(s, *b);
}

bool Grammar::Accepting(int32_t s) {
  std::lock_guard<std::shared_mutex> lock(mu_);
  return pda_ ? pda_->Accepting(s) : dfa_->Accepting(s);
}

bool Grammar::Finished(int32_t s) {
  std::lock_guard<std::shared_mutex> lock(mu_);
  if (pda_) return pda_->Accepting(s) && !pda_->HasNext(s);
  return dfa_->Accepting(s) && !dfa_->HasNext(s);
}

bool Grammar::Matches(std::string_view bytes) {
  std::lock_guard<std::shared_mutex> lock(mu_);
  return pda_ ? pda_->Matches(bytes) : dfa_->Matches(bytes);
}

int32_t Grammar::Run(int32_t s, std::string_view bytes) {
  std::lock_guard<std::shared_mutex> lock(mu_);
  return pda_ ? pda_->Run(s, bytes) : dfa_->Run(s, bytes);
}

size_t Grammar::num_states() {
  std::lock_guard<std::shared_mutex> lock(mu_);
  return pda_ ? pda_->num_states() : dfa_->num_states();
}

size_t Grammar::CacheBytes() const {
  return cached_entries_.load(std::memory_order_relaxed) * sizeof(uint32_t) *
         static_cast<size_t>(trie_->words());
}

bool Grammar::Worn(size_t threshold) {
  std::lock_guard<std::shared_mutex> lock(mu_);
  return pda_ && (pda_->overflowed() || pda_->num_states() > threshold);
}

}  // namespace sluice::structured
