#include "engine/logits_processor.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/thread_pool.h"
#include "engine/sampling_params.h"
#include "structured/token_mask.h"

namespace sluice {

void LogitsRows::Add(LpSlot* slot) {
  slot->pending = true;
  slot->row = -1;
  joining_.push_back(slot);
}

void LogitsRows::Remove(LpSlot* slot) {
  if (slot->pending) {
    joining_.erase(std::remove(joining_.begin(), joining_.end(), slot), joining_.end());
    slot->pending = false;
  }
  if (slot->row >= 0) {
    update_.removed.push_back(slot->row);
    slots_[static_cast<size_t>(slot->row)] = nullptr;
    slot->row = -1;
  }
}

void LogitsRows::Flush(const std::vector<const LpSlot*>& partial) {
  // Joining rows take the holes first (lowest first), then grow the batch.
  size_t hole = 0;
  for (LpSlot* s : joining_) {
    while (hole < static_cast<size_t>(size_) && slots_[hole] != nullptr) ++hole;
    int32_t row;
    if (hole < static_cast<size_t>(size_)) {
      row = static_cast<int32_t>(hole);
    } else {
      row = size_++;
      if (slots_.size() < static_cast<size_t>(size_)) slots_.resize(static_cast<size_t>(size_));
    }
    slots_[static_cast<size_t>(row)] = s;
    s->row = row;
    s->pending = false;
    LpAddedRow a = s->info;
    a.c.row = row;
    a.c.flags = s->reported ? SLUICE_ROW_RESET : 0u;
    s->reported = true;
    update_.added.push_back(a);
  }
  joining_.clear();
  // Compaction: the last row moves into the lowest hole until none is left.
  while (size_ > 0 && slots_[static_cast<size_t>(size_ - 1)] == nullptr) --size_;
  for (int32_t h = 0; h < size_; ++h) {
    if (slots_[static_cast<size_t>(h)] != nullptr) continue;
    const int32_t last = size_ - 1;
    LpSlot* s = slots_[static_cast<size_t>(last)];
    slots_[static_cast<size_t>(h)] = s;
    slots_[static_cast<size_t>(last)] = nullptr;
    s->row = h;
    update_.moved.push_back({last, h, SLUICE_MOVE_ONE_WAY});
    --size_;
    while (size_ > 0 && slots_[static_cast<size_t>(size_ - 1)] == nullptr) --size_;
  }
  (void)max_rows_;
  for (const LpSlot* s : partial) {
    if (s->row >= 0) update_.partial.push_back(s->row);
  }
  update_.batch_size = size_;
  if (size_ > 0 || !update_.removed.empty()) p_->UpdateState(update_);
  update_.Clear();
}

namespace {

// Copies a finished mask into the sampler's staging (pinned memory the device reads, written
// once per row and step, not read back by the host): streaming stores, so the row is written
// in one pass without first reading the destination's lines into the cache.
void StoreMask(uint32_t* dst, const uint32_t* src, int words) {
#if defined(__SSE2__)
  int w = 0;
  while (w < words && (reinterpret_cast<uintptr_t>(dst + w) & 15) != 0) {
    dst[w] = src[w];
    ++w;
  }
  for (; w + 4 <= words; w += 4) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + w),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + w)));
  }
  for (; w < words; ++w) dst[w] = src[w];
#else
  std::memcpy(dst, src, sizeof(uint32_t) * static_cast<size_t>(words));
#endif
}

}  // namespace

void FillLogitsMasks(ThreadPool& pool, const std::vector<std::unique_ptr<LogitsProcessor>>& procs,
                     const std::vector<LpMaskJob>& jobs, std::vector<LpMaskGroup>* groups,
                     int vocab, LpMaskOut* out) {
  const int words = (vocab + 31) / 32;
  const uint32_t tail = vocab % 32 == 0 ? ~0u : (1u << (vocab % 32)) - 1u;
  std::atomic<int> num_masks{0}, num_allowed{0};
  auto names = [&](const LpMaskGroup& g) {
    std::string n;
    for (int j = g.begin; j < g.end; ++j) {
      n += (n.empty() ? "" : ", ") +
           procs[static_cast<size_t>(jobs[static_cast<size_t>(j)].proc)]->name();
    }
    return n;
  };
  // A sparse list: asked into this thread's scratch, checked, then copied into the next free
  // ids of the staging. False: no list (the group takes a bitmask).
  auto fill_sparse = [&](LpMaskGroup& g, std::vector<int32_t>& ids) {
    const LpMaskJob& job = jobs[static_cast<size_t>(g.begin)];
    LogitsProcessor& p = *procs[static_cast<size_t>(job.proc)];
    ids.resize(static_cast<size_t>(words));
    int32_t count = -1;
    Status st = p.FillAllowed(job.row, ids.data(), words, &count);
    if (!st.ok()) {
      g.error = st;
      return true;
    }
    if (count < 0 || count > words) return false;
    if (count == 0) {
      g.error = Internal("logits processors (" + p.name() + ") allowed no token");
      return true;
    }
    for (int32_t i = 0; i < count; ++i) {
      const int32_t t = ids[static_cast<size_t>(i)];
      if (t < 0 || t >= vocab) {
        g.error =
            Internal("logits processor " + p.name() + ": allowed token id " + std::to_string(t) +
                     " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        return true;
      }
    }
    const int at = num_allowed.fetch_add(count, std::memory_order_relaxed);
    std::memcpy(out->allowed + at, ids.data(), sizeof(int32_t) * static_cast<size_t>(count));
    g.allowed_begin = at;
    g.allowed_end = at + count;
    return true;
  };
  // Each row's mask is built in this thread's scratch (cache-resident, reused row after row):
  // preset to all allowed, each processor's refusals, the intersection of several processors,
  // the all-refused check; then stored once into the staging.
  auto fill_group = [&](LpMaskGroup& g, std::vector<uint32_t>& mask, std::vector<uint32_t>& scratch,
                        std::vector<int32_t>& ids) {
    if (g.end - g.begin == 1 &&
        procs[static_cast<size_t>(jobs[static_cast<size_t>(g.begin)].proc)]->has_allowed() &&
        fill_sparse(g, ids)) {
      return;
    }
    mask.resize(static_cast<size_t>(words));
    for (int j = g.begin; j < g.end; ++j) {
      const LpMaskJob& job = jobs[static_cast<size_t>(j)];
      uint32_t* dst = mask.data();
      if (j > g.begin) {
        scratch.resize(static_cast<size_t>(words));
        dst = scratch.data();
      }
      std::fill(dst, dst + words, ~0u);
      dst[words - 1] = tail;
      Status st = procs[static_cast<size_t>(job.proc)]->FillMask(job.row, dst);
      if (!st.ok()) {
        g.error = st;
        return;
      }
      if (dst != mask.data()) {
        for (int w = 0; w < words; ++w) mask[static_cast<size_t>(w)] &= dst[w];
      }
    }
    // Stops at the first allowed token (a full pass over the mask only when none is).
    if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; })) {
      g.error = Internal("logits processors (" + names(g) + ") allowed no token");
    }
    g.mask = num_masks.fetch_add(1, std::memory_order_relaxed);
    StoreMask(out->masks + static_cast<size_t>(g.mask) * static_cast<size_t>(words), mask.data(),
              words);
  };
  // Rows are claimed one at a time (a mask can take from well under a microsecond, a cached
  // one, to milliseconds, a fresh walk of a large vocabulary): a thread that drew slow rows
  // does not hold the step while the others idle.
  const size_t n = groups->size();
  std::atomic<size_t> next{0};
  pool.ParallelFor(
      std::min<size_t>(n, static_cast<size_t>(pool.num_threads())), [&](size_t, size_t) {
        thread_local std::vector<uint32_t> mask, scratch;
        thread_local std::vector<int32_t> ids;
        for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
             i = next.fetch_add(1, std::memory_order_relaxed)) {
          fill_group((*groups)[i], mask, scratch, ids);
        }
#if defined(__SSE2__)
        _mm_sfence();  // the streaming stores are visible before the caller uploads the masks
#endif
      });
  out->num_masks = num_masks.load();
  out->num_allowed = num_allowed.load();
}

namespace {

class StructuredProcessor final : public LogitsProcessor {
 public:
  explicit StructuredProcessor(int max_rows) { rows_.reserve(static_cast<size_t>(max_rows)); }
  const std::string& name() const override { return name_; }

  void UpdateState(const LpUpdate& u) override {
    for (int32_t r : u.removed) rows_[static_cast<size_t>(r)] = Row{};
    if (rows_.size() < static_cast<size_t>(u.batch_size)) {
      rows_.resize(static_cast<size_t>(u.batch_size));
    }
    for (const LpAddedRow& a : u.added) {
      if (rows_.size() <= static_cast<size_t>(a.c.row)) rows_.resize(a.c.row + 1);
      Row& row = rows_[static_cast<size_t>(a.c.row)];
      row = Row{};
      row.grammar = a.params->grammar;
      row.state = row.grammar->start();
      row.output = a.c.output;
    }
    for (const sluice_moved_row& m : u.moved) {
      if (m.kind == SLUICE_MOVE_SWAP) {
        std::swap(rows_[static_cast<size_t>(m.from)], rows_[static_cast<size_t>(m.to)]);
      } else {
        rows_[static_cast<size_t>(m.to)] = std::move(rows_[static_cast<size_t>(m.from)]);
        rows_[static_cast<size_t>(m.from)] = Row{};
      }
    }
    rows_.resize(static_cast<size_t>(u.batch_size));
    // Advance every row over the tokens it gained since the last update.
    for (Row& row : rows_) {
      if (!row.grammar) continue;
      while (row.consumed < row.output->size) {
        const int32_t t = row.output->ids[row.consumed++];
        if (row.state < 0 || row.grammar->trie().IsEos(t)) continue;
        row.state = row.grammar->Advance(row.state, t);
      }
    }
  }

  Status FillMask(int32_t r, uint32_t* mask) override {
    Row& row = rows_[static_cast<size_t>(r)];
    if (row.state < 0) {
      return Internal("structured output: a token was sampled outside the constraint's mask");
    }
    return row.grammar->FillMask(row.state, mask);
  }

 private:
  struct Row {
    std::shared_ptr<structured::Grammar> grammar;
    int32_t state = 0;
    int64_t consumed = 0;
    const sluice_token_view* output = nullptr;
  };
  std::string name_ = kStructuredProcessorName;
  std::vector<Row> rows_;
};

}  // namespace

std::unique_ptr<LogitsProcessor> MakeStructuredProcessor(int max_rows) {
  return std::make_unique<StructuredProcessor>(max_rows);
}

}  // namespace sluice
