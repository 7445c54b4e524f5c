#include "structured/token_mask.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace sluice::structured {

StatusOr<std::shared_ptr<Grammar>> Grammar::Create(const ExprP& e,
                                                   std::shared_ptr<const TokenTrie> trie,
                                                   const CompileLimits& limits) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Nfa> nfa, BuildNfa(e, limits, /*pushdown=*/true));
  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->nfa_states_ = nfa->num_states();
  if (nfa->pushdown()) {
    RETURN_IF_ERROR(Pda::CheckLeftRecursion(*nfa));
    g->pda_ = std::make_unique<Pda>(nfa, limits.max_dfa_states);
    g->start_ = g->pda_->start();
  } else {
    g->dfa_ = std::make_unique<Dfa>(nfa, limits.max_dfa_states);
    g->start_ = g->dfa_->start();
  }
  g->trie_ = std::move(trie);
  for (const Nfa::Counted& c :
       limits.share_counted_masks ? nfa->counted : std::vector<Nfa::Counted>{}) {
    if (g->counted_.size() >= kMaxCountedRuns) break;
    auto reach = g->trie_->ReachWithin(c.bytes);
    const int d = static_cast<int>(reach->depth);
    // Worth it when some positions share: after min (from max(min, 1) to copies - d - 1) or
    // before it (1 to min - d - 1).
    if (c.copies - std::max(c.min, 1) >= 2 || c.min - d - 1 >= 2) {
      g->counted_.push_back({c, std::move(reach)});
    }
  }
  // All caches together within kMaskCacheBytes: 3/5 for states, 1/5 each for abstract and
  // after-first-byte walks.
  const size_t per = sizeof(uint32_t) * static_cast<size_t>(g->trie_->words());
  g->max_cached_ = std::max<size_t>(16, kMaskCacheBytes * 3 / 5 / per);
  g->max_walks_ = std::max<size_t>(4, kMaskCacheBytes / 5 / per);
  return g;
}

void Grammar::MarkTokens(uint32_t node, uint32_t* words) const {
  const TokenTrie& t = *trie_;
  for (uint32_t k = t.tok_begin_[node]; k < t.tok_begin_[node + 1]; ++k) {
    const int32_t id = t.tok_ids_[k];
    words[id >> 5] |= 1u << (id & 31);
  }
}

void Grammar::ClearSubtree(uint32_t node, uint32_t* words) const {
  const TokenTrie& t = *trie_;
  for (uint32_t k = t.tok_begin_[node]; k < t.tok_begin_[t.end_[node]]; ++k) {
    const int32_t id = t.tok_ids_[k];
    words[id >> 5] &= ~(1u << (id & 31));
  }
}

void Grammar::AddEos(bool accepting, uint32_t* words) const {
  if (!accepting) return;
  for (int32_t id : trie_->eos()) {
    if (id >= 0 && id < trie_->vocab_size()) words[id >> 5] |= 1u << (id & 31);
  }
}

// The tokens below `node` (not those at it) allowed from state s, or-ed into words. Exact for
// a Dfa and a real configuration (no holes).
template <typename A>
void Grammar::PlainWalk(A& d, uint32_t root, int32_t s, uint32_t* words) {
  const TokenTrie& t = *trie_;
  stack_.clear();
  stack_.emplace_back(root, s);
  while (!stack_.empty()) {
    const auto [node, st] = stack_.back();
    stack_.pop_back();
    const uint32_t e_end = t.child_begin_[node + 1];
    for (uint32_t e = t.child_begin_[node]; e < e_end; ++e) {
      const int32_t ns = d.NextFast(st, t.edge_byte_[e]);
      if (ns < 0) continue;
      const uint32_t c = t.edge_child_[e];
      MarkTokens(c, words);
      if (t.child_begin_[c + 1] > t.child_begin_[c]) stack_.emplace_back(c, ns);
    }
  }
}

namespace {
// What the walks ask of an automaton beyond NextFast: a Dfa has no holes, stacks or cuts.
bool HasHole(const Dfa&, int32_t) { return false; }
bool HasHole(const Pda& d, int32_t s) { return d.HasHole(s); }
bool HasItems(const Dfa&, int32_t s) { return s >= 0; }
bool HasItems(const Pda& d, int32_t s) { return d.HasItems(s); }
// A Dfa walked by several threads at once (under the grammar's shared lock, Dfa::NextShared):
// a new state that does not fit the table's room reads as dead and is noted (missed), the
// walk's result void.
class DfaShared {
 public:
  explicit DfaShared(Dfa& d) : d_(d) {}
  int32_t NextFast(int32_t s, uint8_t b) {
    const int32_t t = d_.NextShared(s, b);
    if (t != Dfa::kUnknownNext) return t;
    missed_ = true;
    return Dfa::kDead;
  }
  bool missed() const { return missed_; }

 private:
  Dfa& d_;
  bool missed_ = false;
};
bool HasItems(const DfaShared&, int32_t s) { return s >= 0; }
bool Missed(const Dfa&) { return false; }
bool Missed(const Pda&) { return false; }
bool Missed(const DfaShared& d) { return d.missed(); }
// NearWalk's scratch: the calling thread's (walks of one grammar run on several threads).
struct NearScratch {
  int32_t* st;
  uint32_t* in_run;
};
NearScratch NearScratchFor(const TokenTrie& t) {
  thread_local std::vector<int32_t> st;
  thread_local std::vector<uint32_t> in_run;
  const size_t need = static_cast<size_t>(t.max_depth()) + 2;
  if (st.size() < need) st.resize(need);
  if (in_run.size() < need) in_run.resize(need);
  return {st.data(), in_run.data()};
}
int DepthOf(const Dfa&, int32_t) { return 0; }
int DepthOf(const Pda& d, int32_t s) { return d.Depth(s); }
bool CutAt(const Dfa&, int32_t) { return false; }
bool CutAt(const Pda& d, int32_t s) { return d.AtLimit(s); }
std::vector<int32_t> StatesOf(const Dfa& d, int32_t s) { return d.NfaStates(s); }
std::vector<int32_t> StatesOf(const Pda& d, int32_t s) { return d.ItemStates(s); }
int32_t WithStates(Dfa& d, int32_t, std::vector<int32_t> states) {
  return d.Intern(std::move(states));
}
int32_t WithStates(Pda& d, int32_t s, std::vector<int32_t> states) { return d.Remap(s, states); }
// Fewer first bytes than this to one state: the plain walk is as cheap.
constexpr int kMinCommonBytes = 16;
// A counted repetition's cover (CountedAfter) clears at most this many long tokens.
constexpr size_t kMaxCountedLong = 4096;
}  // namespace

// Runs dfs_ to the end: a token is allowed when its walk ends in a state with items (whatever
// the stack below an opaque frame: that path never looked at it), refused when it dies without
// having met a hole, and else its subtree depends on the stack (out->deps).
void Grammar::JumpTo(uint32_t n, const WalkOut& w, uint32_t* words, WalkOut* out) const {
  const TokenTrie& t = *trie_;
  const uint32_t* from = w.mask.data();
  for (uint32_t i = t.tok_begin_[n], e = t.tok_begin_[t.end_[n]]; i < e; ++i) {
    const int32_t id = t.tok_ids_[i];
    const uint32_t bit = 1u << (id & 31);
    words[id >> 5] = (words[id >> 5] & ~bit) | (from[id >> 5] & bit);
  }
  auto lo = std::lower_bound(w.deps.begin(), w.deps.end(), n);
  auto hi = std::lower_bound(lo, w.deps.end(), t.end_[n]);
  out->deps.insert(out->deps.end(), lo, hi);
  out->depth = std::max(out->depth, w.depth);
  out->cut |= w.cut;
}

template <typename A, bool kJump>
void Grammar::ScanTree(A& d, const TokenTrie::ExitForest* f, uint32_t root, int32_t s, bool tainted,
                       uint32_t* words, WalkOut* out) {
  constexpr bool kPda = std::is_same_v<A, Pda>;
  const TokenTrie& t = *trie_;
  const uint32_t* depth = f ? f->depth.data() : t.depth_.data();
  const uint32_t* end = f ? f->end.data() : t.end_.data();
  const uint8_t* byte = f ? f->byte.data() : t.byte_.data();
  const uint32_t* tok_begin = f ? f->tok_begin.data() : t.tok_begin_.data();
  const int32_t* tok_ids = f ? f->toks.data() : t.tok_ids_.data();
  // A stack-dependent node: the trie's, or every trie node a forest node merges.
  auto dep = [&](uint32_t n) {
    if (!f) {
      out->deps.push_back(n);
    } else {
      out->deps.insert(out->deps.end(), f->trie.begin() + f->trie_begin[n],
                       f->trie.begin() + f->trie_begin[n + 1]);
    }
  };
  const uint32_t base = depth[root];
  if (scan_state_.size() < t.max_depth_ + 2) {
    scan_state_.resize(t.max_depth_ + 2);
    scan_taint_.resize(t.max_depth_ + 2);
  }
  // The automaton's table and per-state words read directly (re-read after a transition is
  // computed: that may add states); words written through a pointer that aliases none of them.
  const uint8_t* cls = d.byte_class();
  const size_t n_cls = static_cast<size_t>(d.num_classes());
  const int32_t* table = d.table();
  const uint32_t* info = nullptr;
  if constexpr (kPda) info = d.info();
  uint32_t* __restrict w = words;
  int32_t* __restrict st = scan_state_.data();
  uint8_t* __restrict taint = scan_taint_.data();
  st[0] = s;  // st[k]: the state at depth base + k on the current path
  taint[0] = tainted;
  // kJump: in[k]: the path's bytes up to depth base + k are all in jump_'s loop set.
  uint8_t* in = nullptr;
  if constexpr (kJump) {
    if (scan_in_.size() < t.max_depth_ + 2) scan_in_.resize(t.max_depth_ + 2);
    in = scan_in_.data();
    const TokenTrie::ByteSet& l = jump_->loop;
    bool all = true;
    for (uint32_t n = root; n != 0 && all; n = t.parent_[n]) {
      all = (l[t.byte_[n] >> 6] >> (t.byte_[n] & 63)) & 1;
    }
    in[0] = all;
  }
  uint32_t max_depth = static_cast<uint32_t>(out->depth) << 8;
  uint32_t cut = 0;
  for (uint32_t n = root + 1, stop = end[root]; n < stop;) {
    const uint32_t k = depth[n] - base;
    const int32_t x = st[k - 1];
    int32_t y = table[static_cast<size_t>(x) * n_cls + cls[byte[n]]];
    if (y == A::kUnknownNext) {
      y = d.Next(x, byte[n]);
      table = d.table();
      if constexpr (kPda) info = d.info();
    }
    if (y < 0) {
      if (taint[k - 1]) dep(n);  // a path through the hole may go on
      n = end[n];
      continue;
    }
    if constexpr (kPda) {
      const uint32_t fl = info[y];
      max_depth = std::max(max_depth, fl & ~0xffu);
      cut |= fl;
      if (!(fl & Pda::kInfoItems)) {  // only the hole: everything below depends on the stack
        dep(n);
        n = end[n];
        continue;
      }
      taint[k] = taint[k - 1] | static_cast<uint8_t>(fl & Pda::kInfoHole);
    } else {
      taint[k] = taint[k - 1];
    }
    if constexpr (kJump) {
      const TokenTrie::ByteSet& l = jump_->loop;
      in[k] = in[k - 1] && ((l[byte[n] >> 6] >> (byte[n] & 63)) & 1);
      if (y == jump_state_ && in[k] && !taint[k]) {
        JumpTo(n, *jump_, w, out);
        n = end[n];
        continue;
      }
    }
    for (uint32_t i = tok_begin[n], e = tok_begin[n + 1]; i < e; ++i) {
      const int32_t id = tok_ids[i];
      w[id >> 5] |= 1u << (id & 31);
    }
    if (f && f->below[n] != TokenTrie::ExitForest::kNoSubtree) {
      // A leaf standing for a trie subtree: walked in the trie, on buffers of its own (this
      // walk's path stays in st and taint); the automaton may grow meanwhile.
      std::swap(scan_state_, scan_state_alt_);
      std::swap(scan_taint_, scan_taint_alt_);
      out->depth = static_cast<int>(max_depth >> 8);
      ScanTree<A, false>(d, nullptr, f->below[n], y, taint[k] != 0, w, out);
      max_depth = std::max(max_depth, static_cast<uint32_t>(out->depth) << 8);
      std::swap(scan_state_, scan_state_alt_);
      std::swap(scan_taint_, scan_taint_alt_);
      table = d.table();
      if constexpr (kPda) info = d.info();
      n = end[n];
      continue;
    }
    st[k] = y;
    ++n;
  }
  out->depth = static_cast<int>(max_depth >> 8);
  out->cut = out->cut || (cut & Pda::kInfoCut) != 0;
}

// Runs the walks of dfs_'s items: a token is allowed when its walk ends in a state with items
// (whatever the stack below an opaque frame: that path never looked at it), refused when it
// dies without having met a hole, and else its subtree depends on the stack (out->deps).
template <typename A>
void Grammar::Dfs(A& d, uint32_t* words, WalkOut* out) {
  while (!dfs_.empty()) {
    const DfsItem it = dfs_.back();
    dfs_.pop_back();
    Scan(d, it.node, it.state, it.tainted, words, out);
  }
}

template <typename A>
void Grammar::Enter(A& d, uint32_t c, int32_t y, uint32_t* words, WalkOut* out) {
  const TokenTrie& t = *trie_;
  out->depth = std::max(out->depth, DepthOf(d, y));
  out->cut |= CutAt(d, y);
  if (!HasItems(d, y)) {  // only the hole: everything below depends on the stack
    out->deps.push_back(c);
    return;
  }
  MarkTokens(c, words);
  if (t.child_begin_[c + 1] > t.child_begin_[c]) dfs_.push_back({c, y, HasHole(d, y)});
  Dfs(d, words, out);
}

template <typename A>
void Grammar::ExitWalk(A& d, int32_t x, const TokenTrie::ByteSet& l, uint32_t* words,
                       WalkOut* out) {
  std::shared_ptr<const TokenTrie::ExitForest> f = trie_->Exits(l);
  std::memcpy(words, f->all_in.data(), sizeof(uint32_t) * f->all_in.size());
  for (uint32_t r : f->roots) {
    // Every token of this group reads bytes of L from x (staying in x), then the exit byte.
    const int32_t y = d.NextFast(x, f->byte[r]);
    if (y < 0) continue;  // (x has no hole: refused)
    out->depth = std::max(out->depth, DepthOf(d, y));
    out->cut |= CutAt(d, y);
    if (!HasItems(d, y)) {  // only the hole: every subtree depends on the stack
      out->deps.insert(out->deps.end(), f->trie.begin() + f->trie_begin[r],
                       f->trie.begin() + f->trie_begin[r + 1]);
      continue;
    }
    for (uint32_t i = f->tok_begin[r]; i < f->tok_begin[r + 1]; ++i) {
      const int32_t id = f->toks[i];
      words[id >> 5] |= 1u << (id & 31);
    }
    if (f->end[r] > r + 1) ScanTree<A, false>(d, f.get(), r, y, HasHole(d, y), words, out);
  }
}

template <typename A>
bool Grammar::CountedAfter(A& d, int32_t ts, uint32_t* words, WalkOut* out) {
  if (counted_.empty()) return false;
  const TokenTrie& t = *trie_;
  // ts's states in one counted repetition, all past its min, far enough from its end.
  std::vector<int32_t> st = StatesOf(d, ts);
  const CountedRun* run = nullptr;
  int lo = 0, hi = 0;
  for (const CountedRun& cr : counted_) {
    const Nfa::Counted& c = cr.c;
    const int32_t end = c.begin + c.copies * c.stride;
    int l = c.copies + 1, h = 0;
    for (int32_t q : st) {
      if (q < c.begin || q >= end) continue;
      const int k = (q - c.begin) / c.stride + 1;
      l = std::min(l, k);
      h = std::max(h, k);
    }
    if (h == 0) continue;
    if (run) return false;  // states in two repetitions
    run = &cr;
    lo = l;
    hi = h;
  }
  if (!run || lo < run->c.min) return false;
  const int room = run->c.copies - hi;  // copies a path from ts may still read
  if (room < kMinCommonBytes) return false;
  const size_t n_long = t.TokensLongerThan(static_cast<size_t>(room) + 1);
  if (n_long > kMaxCountedLong) return false;
  // shifted(m): ts with its states m copies further (past min, so every block behaves alike).
  std::vector<int32_t> at(static_cast<size_t>(room) + 1, kUnknownCanonical);
  at[0] = ts;
  auto shifted = [&](int m) {
    int32_t& a = at[static_cast<size_t>(m)];
    if (a != kUnknownCanonical) return a;
    std::vector<int32_t> v = st;
    const Nfa::Counted& c = run->c;
    const int32_t end = c.begin + c.copies * c.stride;
    for (int32_t& q : v) {
      if (q >= c.begin && q < end) q += m * c.stride;
    }
    a = WithStates(d, ts, std::move(v));
    return a;
  };
  const int32_t next = shifted(1);
  if (next < 0) return false;
  // L: the bytes that read one more copy and nothing else. A path of bytes of L from ts reads
  // one copy per byte: m of them lead to shifted(m) while m <= room, and die past it.
  TokenTrie::ByteSet l = {0, 0, 0, 0};
  int n_l = 0;
  for (int b = 0; b < 256; ++b) {
    if (d.NextFast(ts, static_cast<uint8_t>(b)) == next) {
      l[static_cast<size_t>(b) >> 6] |= 1ull << (b & 63);
      ++n_l;
    }
  }
  if (n_l < kMinCommonBytes) return false;
  // Past `room` bytes of L the last copy leaves no room for another: the tokens longer than
  // room + 1 bytes are walked for real, from shifted(room), below their node at depth room + 1
  // when its later bytes are in L (a token leaving L before that is an exit below).
  const int32_t last = shifted(room);
  if (last < 0) return false;
  std::shared_ptr<const TokenTrie::LoopCover> cover = t.Cover(l);
  std::memcpy(words, cover->mask.data(), sizeof(uint32_t) * cover->mask.size());
  std::vector<uint32_t> tops;
  for (size_t i = 0; i < n_long; ++i) {
    const int32_t id = t.by_length_[i];
    words[id >> 5] &= ~(1u << (id & 31));
    uint32_t n = t.node_of_[static_cast<size_t>(id)];
    while (t.depth_[n] > static_cast<uint32_t>(room) + 1) n = t.parent_[n];
    tops.push_back(n);
  }
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  // Exits before `room` bytes of L: from ts shifted by the bytes read.
  for (uint32_t e : cover->exits) {
    const uint32_t c = t.edge_child_[e];
    const int m = static_cast<int>(t.depth_[c]) - 2;  // bytes of L read before the exit
    if (m >= room) continue;
    const int32_t from = shifted(m);
    if (from < 0) continue;  // the state limit (the caller reports it)
    const int32_t y = d.NextFast(from, t.edge_byte_[e]);
    if (y >= 0) Enter(d, c, y, words, out);
  }
  for (uint32_t top : tops) {
    bool in_l = true;  // the bytes after the first, up to top
    for (uint32_t n = top; t.parent_[n] != 0 && in_l; n = t.parent_[n]) {
      const uint8_t b = t.byte_[n];
      in_l = (l[b >> 6] >> (b & 63)) & 1;
    }
    if (!in_l) continue;
    Scan(d, top, last, HasHole(d, last), words, out);
  }
  return true;
}

template <typename A>
const Grammar::WalkOut* Grammar::After(A& d, int32_t ts) {
  auto it = after_cache_.find(ts);
  if (it != after_cache_.end()) {
    after_lru_.splice(after_lru_.begin(), after_lru_, it->second);
    return &it->second->second;
  }
  const TokenTrie& t = *trie_;
  WalkOut out;
  out.mask.assign(static_cast<size_t>(t.words()), 0);
  out.depth = DepthOf(d, ts);
  out.cut = CutAt(d, ts);
  uint32_t* words = out.mask.data();
  TokenTrie::ByteSet l = {0, 0, 0, 0};
  int loops = 0;
  for (int b = 0; b < 256; ++b) {
    if (d.NextFast(ts, static_cast<uint8_t>(b)) == ts) {
      l[static_cast<size_t>(b) >> 6] |= 1ull << (b & 63);
      ++loops;
    }
  }
  dfs_.clear();
  if (loops >= kMinCommonBytes) {
    // ts loops on L: its whole walk, once per exit byte (Walk uses it for the first bytes of
    // L, which lead from ts to ts).
    out.whole = true;
    out.loop = l;
    ExitWalk(d, ts, l, words, &out);
  } else if (CountedAfter(d, ts, words, &out)) {
    // (a counted repetition's cover)
  } else {
    for (uint32_t e = t.child_begin_[0]; e < t.child_begin_[1]; ++e) {
      const uint32_t c = t.edge_child_[e];
      MarkTokens(c, words);
      if (t.child_begin_[c + 1] > t.child_begin_[c]) dfs_.push_back({c, ts, false});
    }
    Dfs(d, words, &out);
  }
  std::sort(out.deps.begin(), out.deps.end());
  if (after_cache_.size() >= max_walks_) {
    after_cache_.erase(after_lru_.back().first);
    after_lru_.pop_back();
  }
  after_lru_.emplace_front(ts, std::move(out));
  after_cache_[ts] = after_lru_.begin();
  CountEntries();
  return &after_lru_.front().second;
}

template <typename A>
void Grammar::Walk(A& d, int32_t x, uint32_t* words, WalkOut* out) {
  const TokenTrie& t = *trie_;
  const size_t n = static_cast<size_t>(t.words());
  out->deps.clear();
  out->depth = DepthOf(d, x);
  out->cut = CutAt(d, x);
  const bool root_hole = HasHole(d, x);
  const uint32_t r_begin = t.child_begin_[0], r_end = t.child_begin_[1];
  // The first byte's states; the most common one (with items, no hole) if common enough.
  int32_t first[256];
  int32_t common = -1;
  if (!root_hole) {
    int best = 0, run = 0;
    int32_t cand = -1;
    for (uint32_t e = r_begin; e < r_end; ++e) {
      first[e - r_begin] = d.NextFast(x, t.edge_byte_[e]);
    }
    // Boyer-Moore majority vote, then a count (a common state is usually most bytes).
    for (uint32_t i = 0; i < r_end - r_begin; ++i) {
      if (first[i] < 0) continue;
      if (run == 0) cand = first[i];
      run += first[i] == cand ? 1 : -1;
    }
    if (cand >= 0) {
      for (uint32_t i = 0; i < r_end - r_begin; ++i) best += first[i] == cand;
    }
    if (best >= kMinCommonBytes && HasItems(d, cand) && !HasHole(d, cand)) common = cand;
  }
  dfs_.clear();
  if (common < 0) {
    std::memset(words, 0, sizeof(uint32_t) * n);
    dfs_.push_back({0, x, root_hole});
    Dfs(d, words, out);
    std::sort(out->deps.begin(), out->deps.end());
    return;
  }
  const WalkOut* after = After(d, common);
  std::memcpy(words, after->mask.data(), sizeof(uint32_t) * n);
  out->depth = std::max(out->depth, after->depth);
  out->cut |= after->cut;
  if (after->whole && common == x) {  // x's own whole walk
    out->deps = after->deps;
    return;
  }
  // The first bytes whose tokens After decides: those to `common` (and, for a whole walk, in
  // its loop set: common reads the rest of their bytes as from the root).
  auto kept = [&](uint8_t b, int32_t y) {
    return y == common && (!after->whole || ((after->loop[b >> 6] >> (b & 63)) & 1));
  };
  // After's stack-dependent subtrees under those first bytes.
  for (uint32_t c : after->deps) {
    uint32_t top = c;
    while (t.parent_[top] != 0) top = t.parent_[top];
    if (kept(t.byte_[top], d.NextFast(x, t.byte_[top]))) out->deps.push_back(c);
  }
  // The others walked apart; inside them, a node entered in `common` by bytes of its loop set
  // takes its bits from After's whole walk.
  if (after->whole) {
    jump_ = after;
    jump_state_ = common;
  }
  for (uint32_t e = r_begin; e < r_end; ++e) {
    const int32_t y = first[e - r_begin];
    if (kept(t.edge_byte_[e], y)) continue;
    const uint32_t c = t.edge_child_[e];
    ClearSubtree(c, words);
    if (y >= 0) Enter(d, c, y, words, out);  // (y < 0, untainted: refused)
  }
  jump_ = nullptr;
  jump_state_ = -1;
  std::sort(out->deps.begin(), out->deps.end());
}

template <typename A>
void Grammar::NearWalk(A& d, int32_t s, const TokenTrie::ByteSet& run, uint32_t within,
                       uint32_t* words, int32_t* st, uint32_t* in_run) {
  const TokenTrie& t = *trie_;
  const uint32_t* depth = t.depth_.data();
  const uint32_t* end = t.end_.data();
  const uint32_t* sub_depth = t.sub_depth_.data();
  const uint8_t* byte = t.byte_.data();
  const uint32_t* tok_begin = t.tok_begin_.data();
  const int32_t* tok_ids = t.tok_ids_.data();
  // st[k]: the state at depth k on the path (kDead: refused); in_run[k]: the path's prefix in
  // the run's bytes at depth k.
  st[0] = s;
  in_run[0] = 0;
  for (uint32_t n = 1, stop = end[0]; n < stop;) {
    const uint32_t k = depth[n];
    const uint8_t b = byte[n];
    const uint32_t p = in_run[k - 1];
    const uint32_t r = (p == k - 1 && ((run[b >> 6] >> (b & 63)) & 1)) ? k : p;
    // Every token below has a prefix in the run of at most `within`: the canonical bits hold.
    if ((r < k && r <= within) || sub_depth[n] <= within) {
      n = end[n];
      continue;
    }
    const int32_t y = d.NextFast(st[k - 1], b);
    if (!HasItems(d, y)) {    // (s is a real configuration: no holes)
      if (Missed(d)) return;  // (a read-only walk met an unknown transition: given up)
      // Refused from s: every token below, whatever its prefix in the run (the shorter ones
      // are refused at the canonical state too).
      ClearSubtree(n, words);
      n = end[n];
      continue;
    }
    if (r > within) {
      for (uint32_t i = tok_begin[n], e = tok_begin[n + 1]; i < e; ++i) {
        const int32_t id = tok_ids[i];
        words[id >> 5] |= 1u << (id & 31);
      }
    }
    st[k] = y;
    in_run[k] = r;
    ++n;
  }
}

void Grammar::PdaMask(int32_t s, uint32_t* words) {
  Pda& d = *pda_;
  const TokenTrie& t = *trie_;
  const size_t n = static_cast<size_t>(t.words());
  WalkOut local;
  const int32_t a = d.Abstract(s);
  if (a < 0) return;  // the state limit (FillMask reports it)
  if (a == s) {       // no stack below: the walk is exact (no holes)
    Walk(d, s, words, &local);
    AddEos(d.Accepting(s), words);
    return;
  }
  const WalkOut* abs = nullptr;
  auto it = abs_cache_.find(a);
  if (it != abs_cache_.end()) {
    abs_lru_.splice(abs_lru_.begin(), abs_lru_, it->second);
    abs = &it->second->second;
  } else {
    WalkOut fresh;
    fresh.mask.resize(n);
    Walk(d, a, fresh.mask.data(), &fresh);
    if (d.overflowed()) return;
    if (abs_cache_.size() >= max_walks_) {
      abs_cache_.erase(abs_lru_.back().first);
      abs_lru_.pop_back();
    }
    abs_lru_.emplace_front(a, std::move(fresh));
    abs_cache_[a] = abs_lru_.begin();
    CountEntries();
    abs = &abs_lru_.front().second;
  }
  // Depths: a real item's stack lies where the opaque frame is, so a configuration met in the
  // abstract walk is at most Depth(s) deeper for real, and a closure's passing calls at most a
  // chain of rules deeper still (no left recursion). Near the limit a real walk could cut a
  // call the abstract one kept: walk for real there.
  const int margin = 2 * static_cast<int>(d.num_rules()) + 2;
  if (abs->cut || d.Depth(s) + abs->depth + margin > kMaxRecursionDepth) {
    Walk(d, s, words, &local);
    AddEos(d.Accepting(s), words);
    return;
  }
  std::memcpy(words, abs->mask.data(), sizeof(uint32_t) * n);
  // The stack-dependent subtrees, walked from s for real; their prefixes share states.
  path_.clear();  // (node, state) from the root's child down
  for (uint32_t c : abs->deps) {
    chain_.clear();
    for (uint32_t x = c; x != 0; x = t.parent_[x]) chain_.push_back(x);
    std::reverse(chain_.begin(), chain_.end());
    size_t k = 0;
    while (k < path_.size() && k < chain_.size() && path_[k].first == chain_[k]) ++k;
    path_.resize(k);
    int32_t st = k ? path_[k - 1].second : s;
    for (; k < chain_.size() && st >= 0; ++k) {
      st = d.NextFast(st, t.byte_[chain_[k]]);
      path_.emplace_back(chain_[k], st);
    }
    if (st < 0) continue;
    MarkTokens(c, words);
    WalkOut real;  // s is a real configuration: no holes, no deps
    Scan(d, c, st, false, words, &real);
  }
  AddEos(d.Accepting(s), words);
}

Status Grammar::OwnMask(int32_t s, uint32_t* words) {
  mask_walks_.fetch_add(1, std::memory_order_relaxed);
  if (pda_) {
    PdaMask(s, words);
  } else {
    WalkOut local;
    Walk(*dfa_, s, words, &local);
    AddEos(dfa_->Accepting(s), words);
  }
  RETURN_IF_ERROR(StateLimit());
  CacheMask(s, words);
  return Status::Ok();
}

Status Grammar::SharedMask(int32_t s, const Canon& c, uint32_t* words) {
  // The canonical state's mask, cached under its own id.
  if (!CachedMask(c.state, words)) RETURN_IF_ERROR(OwnMask(c.state, words));
  // The tokens that reach further than the runs' depth: each run from s itself.
  bool any = false;
  for (size_t ri = 0; ri < counted_.size(); ++ri) {
    if (!((c.runs >> ri) & 1)) continue;
    if (static_cast<int32_t>(ri) == c.near_run) {
      mask_walks_.fetch_add(1, std::memory_order_relaxed);  // (a walk, if a pruned one)
      const NearScratch x = NearScratchFor(*trie_);
      if (pda_) {
        NearWalk(*pda_, s, counted_[ri].c.bytes, c.near_within, words, x.st, x.in_run);
      } else {
        NearWalk(*dfa_, s, counted_[ri].c.bytes, c.near_within, words, x.st, x.in_run);
      }
      any = true;
      continue;
    }
    for (int32_t id : counted_[ri].reach->longer) {
      const std::string* b = trie_->bytes(id);
      if (!b) continue;
      const int32_t t = pda_ ? pda_->Run(s, *b) : dfa_->Run(s, *b);
      const uint32_t bit = 1u << (id & 31);
      if (t >= 0) {
        words[id >> 5] |= bit;
      } else {
        words[id >> 5] &= ~bit;
      }
      any = true;
    }
  }
  RETURN_IF_ERROR(StateLimit());
  if (any) CacheMask(s, words);  // (c.exceptions: FillMask looks s up)
  return Status::Ok();
}

bool Grammar::SharedExceptionWalk(int32_t s, const Canon& c, uint32_t* words) {
  DfaShared d(*dfa_);
  const NearScratch x = NearScratchFor(*trie_);
  for (size_t ri = 0; ri < counted_.size(); ++ri) {
    if (!((c.runs >> ri) & 1)) continue;
    if (static_cast<int32_t>(ri) == c.near_run) {
      NearWalk(d, s, counted_[ri].c.bytes, c.near_within, words, x.st, x.in_run);
      if (d.missed()) return false;
      continue;
    }
    for (int32_t id : counted_[ri].reach->longer) {
      const std::string* b = trie_->bytes(id);
      if (!b) continue;
      int32_t t = s;
      for (size_t i = 0; i < b->size() && t >= 0; ++i) {
        t = d.NextFast(t, static_cast<uint8_t>((*b)[i]));
      }
      if (d.missed()) return false;
      const uint32_t bit = 1u << (id & 31);
      if (t >= 0) {
        words[id >> 5] |= bit;
      } else {
        words[id >> 5] &= ~bit;
      }
    }
  }
  return true;
}

Status Grammar::FillMask(int32_t s, uint32_t* words) {
  // A mask already known: under cache_mu_ only (beside walks of other states).
  if (FastMask(s, words)) return Status::Ok();
  // A Dfa state whose mask is its canonical state's (cached) but for exceptions (a counted run
  // near its end: NearWalk, the costly part of most fresh masks): under the shared lock, so
  // that several threads walk such states at once (the Dfa grown by NextShared).
  if (dfa_ && !counted_.empty()) {
    std::shared_lock<std::shared_mutex> shared(mu_);
    bool ok = false;
    const Canon c = Canonical(s, /*shared=*/true, &ok);
    if (ok) {
      const int32_t key = c.exceptions ? s : c.state;
      NoteKey(s, key);
      if (CachedMask(key, words)) return Status::Ok();
      if (c.state != s && c.exceptions && CachedMask(c.state, words) &&
          SharedExceptionWalk(s, c, words)) {
        if (dfa_->OverflowedShared()) return StateLimitError();
        if (c.near_run >= 0) mask_walks_.fetch_add(1, std::memory_order_relaxed);
        CacheMask(s, words);
        return Status::Ok();
      }
    }
  }
  // Everything else (and what the shared walk could not do: the Dfa outgrew the room made for
  // it) under the exclusive lock.
  std::lock_guard<std::shared_mutex> lock(mu_);
  const Canon c = Canonical(s);
  // A state with exceptions caches its own mask; one without finds its canonical state's.
  const int32_t key = c.exceptions ? s : c.state;
  NoteKey(s, key);
  Status st;
  if (CachedMask(key, words)) {
    st = Status::Ok();
  } else if (pda_ && pda_->AtLimit(s)) {
    return Status(StatusCode::kResourceExhausted,
                  "structured output: the output is nested " + std::to_string(kMaxRecursionDepth) +
                      " levels deep, the limit of recursive constraints");
  } else if (c.state == s) {
    st = OwnMask(s, words);
  } else {
    st = SharedMask(s, c, words);
  }
  if (dfa_ && !counted_.empty()) dfa_->Reserve(kSharedWalkStates);  // room for shared walks
  return st;
}

Status Grammar::ReferenceMask(int32_t s, uint32_t* words) {
  std::lock_guard<std::shared_mutex> lock(mu_);
  if (pda_ && pda_->AtLimit(s)) {
    return Status(StatusCode::kResourceExhausted, "structured output: nesting limit");
  }
  std::memset(words, 0, sizeof(uint32_t) * static_cast<size_t>(trie_->words()));
  if (pda_) {
    PlainWalk(*pda_, 0, s, words);
    AddEos(pda_->Accepting(s), words);
  } else {
    PlainWalk(*dfa_, 0, s, words);
    AddEos(dfa_->Accepting(s), words);
  }
  if (pda_ ? pda_->overflowed() : dfa_->overflowed()) {
    return Status(StatusCode::kResourceExhausted, "structured output: state limit");
  }
  return Status::Ok();
}

}  // namespace sluice::structured
