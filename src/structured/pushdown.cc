#include "structured/pushdown.h"

#include <algorithm>
#include <string>

namespace sluice::structured {

size_t Pda::SetHash::operator()(const std::vector<uint64_t>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (uint64_t x : v) h = (h ^ x) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

Pda::Pda(std::shared_ptr<const Nfa> nfa, size_t max_states)
    : nfa_(std::move(nfa)), max_states_(max_states) {
  num_classes_ = ByteClasses(*nfa_, byte_class_, &class_rep_);
  const size_t n = nfa_->num_states();
  std::vector<Nfa::Call> calls = nfa_->calls;
  std::stable_sort(calls.begin(), calls.end(),
                   [](const Nfa::Call& a, const Nfa::Call& b) { return a.from < b.from; });
  call_begin_.assign(n + 1, 0);
  for (const Nfa::Call& c : calls) ++call_begin_[static_cast<size_t>(c.from) + 1];
  for (size_t q = 0; q < n; ++q) call_begin_[q + 1] += call_begin_[q];
  call_ = std::move(calls);
  returns_.assign(n, 0);
  for (int32_t a : nfa_->rule_accept) returns_[static_cast<size_t>(a)] = 1;
  // Tail calls: where nothing but the caller's own return follows the call (right recursion,
  // `list ::= item list | ""`), the callee returns straight to the caller's caller: no frame
  // is pushed, so such a rule repeats without nesting deeper.
  tail_.assign(call_.size(), 0);
  std::vector<uint8_t> seen(n, 0);
  for (size_t c = 0; c < call_.size(); ++c) {
    std::vector<int32_t> stack = {call_[c].ret}, visited;
    bool tail = true, returns = false;
    while (!stack.empty() && tail) {
      const int32_t q = stack.back();
      stack.pop_back();
      const auto qs = static_cast<size_t>(q);
      if (seen[qs]) continue;
      seen[qs] = 1;
      visited.push_back(q);
      if (!nfa_->edges[qs].empty() || call_begin_[qs] != call_begin_[qs + 1] || q == nfa_->accept) {
        tail = false;
      }
      returns |= returns_[qs] != 0;
      for (int32_t y : nfa_->eps[qs]) stack.push_back(y);
    }
    for (int32_t q : visited) seen[static_cast<size_t>(q)] = 0;
    tail_[c] = tail && returns;
  }
  frames_.push_back({-1, -1, 0});  // kOpaque: depth 0, so abstract depths count from it
  std::vector<uint64_t> s = {Pack(nfa_->start, -1)};
  bool cut = false, hole = false;
  Closure(&s, &cut, &hole);
  start_ = AddState(std::move(s), cut);
}

int32_t Pda::Push(int32_t ret, int32_t below) {
  const uint64_t key = Pack(ret, below);
  auto it = frame_ids_.find(key);
  if (it != frame_ids_.end()) return it->second;
  const int32_t depth = below < 0 ? 1 : frames_[static_cast<size_t>(below)].depth + 1;
  frames_.push_back({ret, below, depth});
  const auto id = static_cast<int32_t>(frames_.size() - 1);
  frame_ids_.emplace(key, id);
  return id;
}

bool Pda::SeenSet::Insert(uint64_t x) {
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = Hash(x) & mask;; i = (i + 1) & mask) {
    if (gen_[i] != gen_now_) {
      gen_[i] = gen_now_;
      slots_[i] = x;
      ++size_;
      return true;
    }
    if (slots_[i] == x) return false;
  }
}

void Pda::SeenSet::Clear() {
  size_ = 0;
  if (++gen_now_ == 0) {  // wrapped: every stamp is stale again
    std::fill(gen_.begin(), gen_.end(), 0u);
    gen_now_ = 1;
  }
}

void Pda::SeenSet::Grow() {
  std::vector<uint64_t> live;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (gen_[i] == gen_now_) live.push_back(slots_[i]);
  }
  const size_t n = std::max<size_t>(64, slots_.size() * 2);
  slots_.assign(n, 0);
  gen_.assign(n, 0u);
  gen_now_ = 1;
  size_ = 0;
  for (uint64_t x : live) Insert(x);
}

void Pda::Closure(std::vector<uint64_t>* items, bool* cut, bool* hole) {
  work_.assign(items->begin(), items->end());
  items->clear();
  seen_.Clear();
  while (!work_.empty()) {
    const uint64_t it = work_.back();
    work_.pop_back();
    if (!seen_.Insert(it)) continue;
    const int32_t q = StateOf(it), st = StackOf(it);
    const auto qs = static_cast<size_t>(q);
    if (!nfa_->edges[qs].empty() || (q == nfa_->accept && st < 0)) items->push_back(it);
    for (int32_t y : nfa_->eps[qs]) work_.push_back(Pack(y, st));
    for (uint32_t c = call_begin_[qs]; c < call_begin_[qs + 1]; ++c) {
      const int depth = st < 0 ? 1 : frames_[static_cast<size_t>(st)].depth + 1;
      if (depth > kMaxRecursionDepth && !(tail_[c] && st >= 0)) {
        *cut = true;
        continue;
      }
      const Nfa::Call& call = call_[c];
      const int32_t start = nfa_->rule_start[static_cast<size_t>(call.rule)];
      if (tail_[c] && st >= 0) {
        work_.push_back(Pack(start, st));
        continue;
      }
      work_.push_back(Pack(start, Push(call.ret, st)));
    }
    if (returns_[qs] && st == kOpaque) {
      *hole = true;  // returns into the unknown rest of the stack
    } else if (returns_[qs] && st >= 0) {
      const Frame& f = frames_[static_cast<size_t>(st)];
      work_.push_back(Pack(f.ret, f.below));
    }
  }
  std::sort(items->begin(), items->end());
}

const Pda::SeedClosure& Pda::ClosureOf(uint64_t seed) {
  auto it = seed_closures_.find(seed);
  if (it != seed_closures_.end()) return it->second;
  SeedClosure c;
  c.items.push_back(seed);
  Closure(&c.items, &c.cut, &c.hole);
  if (seed_closure_items_ + c.items.size() > kMaxSeedClosureItems) {
    seed_closures_.clear();
    seed_closure_items_ = 0;
  }
  seed_closure_items_ += c.items.size();
  return seed_closures_.emplace(seed, std::move(c)).first->second;
}

std::vector<int32_t> Pda::ItemStates(int32_t s) const {
  std::vector<int32_t> out;
  for (uint64_t it : sets_[static_cast<size_t>(s)]) {
    if (it < kHoleItem) out.push_back(StateOf(it));
  }
  return out;
}

int32_t Pda::Remap(int32_t s, const std::vector<int32_t>& states) {
  std::vector<uint64_t> items;
  size_t i = 0;
  for (uint64_t it : sets_[static_cast<size_t>(s)]) {
    if (it >= kHoleItem) continue;
    items.push_back(Pack(states[i++], StackOf(it)));
  }
  std::sort(items.begin(), items.end());
  items.erase(std::unique(items.begin(), items.end()), items.end());
  return AddState(std::move(items), at_limit_[static_cast<size_t>(s)],
                  (flags_[static_cast<size_t>(s)] & kHoleFlag) != 0);
}

int32_t Pda::AddState(const std::vector<uint64_t>& items, bool cut, bool hole) {
  if (items.empty() && !hole) return kDead;
  const bool has_items = !items.empty();
  // Markers, after the sorted items (the largest values): part of the key, so the same items
  // without the cut (or the hole) differ.
  key_.assign(items.begin(), items.end());
  if (hole) key_.push_back(kHoleItem);
  if (cut) key_.push_back(kCutItem);
  auto it = ids_.find(key_);
  if (it != ids_.end()) return it->second;
  int depth = 0;
  for (uint64_t item : items) {
    const int32_t st = StackOf(item);
    if (st >= 0) depth = std::max(depth, frames_[static_cast<size_t>(st)].depth);
  }
  if (sets_.size() >= max_states_) {
    overflowed_ = true;
    return kDead;
  }
  const auto id = static_cast<int32_t>(sets_.size());
  accepting_.push_back(std::binary_search(items.begin(), items.end(), Pack(nfa_->accept, -1)));
  at_limit_.push_back(cut);
  depth_.push_back(depth);
  flags_.push_back(static_cast<uint8_t>((hole ? kHoleFlag : 0) | (has_items ? kItemsFlag : 0)));
  info_.push_back((hole ? kInfoHole : 0) | (has_items ? kInfoItems : 0) | (cut ? kInfoCut : 0) |
                  (static_cast<uint32_t>(depth) << 8));
  has_next_.push_back(-1);
  std::array<uint64_t, 4> reads{};
  for (uint64_t item : items) AddReadBytes(*nfa_, StateOf(item), &reads);
  AppendTransitionRow(reads, class_rep_, &table_);
  ids_.emplace(key_, id);
  sets_.push_back(key_);
  return id;
}

int32_t Pda::Next(int32_t s, uint8_t b) {
  if (s < 0) return kDead;
  const size_t slot = static_cast<size_t>(s) * num_classes_ + byte_class_[b];
  if (table_[slot] != kUnknown) return table_[slot];
  const uint8_t rep = class_rep_[byte_class_[b]];
  seeds_.clear();
  for (uint64_t it : sets_[static_cast<size_t>(s)]) {
    if (it >= kHoleItem) continue;  // markers
    const int32_t st = StackOf(it);
    for (const Nfa::Edge& ed : nfa_->edges[static_cast<size_t>(StateOf(it))]) {
      if (ed.lo <= rep && rep <= ed.hi) seeds_.push_back(Pack(ed.to, st));
    }
  }
  int32_t t = kDead;
  if (!seeds_.empty()) {
    std::sort(seeds_.begin(), seeds_.end());
    seeds_.erase(std::unique(seeds_.begin(), seeds_.end()), seeds_.end());
    bool cut = false, hole = false;
    if (seeds_.size() == 1) {
      const SeedClosure& c = ClosureOf(seeds_[0]);
      t = AddState(c.items, c.cut, c.hole);
    } else {  // (a union of memoised closures can repeat most items once per seed)
      next_.assign(seeds_.begin(), seeds_.end());
      Closure(&next_, &cut, &hole);
      t = AddState(next_, cut, hole);
    }
  }
  if (!overflowed_ || t != kDead) table_[slot] = t;
  return t;
}

int32_t Pda::Run(int32_t s, std::string_view bytes) {
  for (char c : bytes) {
    if (s < 0) return kDead;
    s = Next(s, static_cast<uint8_t>(c));
  }
  return s;
}

bool Pda::HasNext(int32_t s) {
  if (s < 0) return false;
  int8_t& h = has_next_[static_cast<size_t>(s)];
  if (h >= 0) return h != 0;
  bool any = false;
  for (int c = 0; c < num_classes_ && !any; ++c)
    any = Next(s, class_rep_[static_cast<size_t>(c)]) >= 0;
  has_next_[static_cast<size_t>(s)] = any ? 1 : 0;
  return any;
}

int32_t Pda::Abstract(int32_t s) {
  if (s < 0) return kDead;
  const std::vector<uint64_t>& set = sets_[static_cast<size_t>(s)];
  std::vector<uint64_t> items;
  items.reserve(set.size());
  bool stacked = false, cut = false, hole = false;
  for (uint64_t it : set) {
    if (it >= kHoleItem) {
      cut |= it == kCutItem;
      hole |= it == kHoleItem;
      continue;
    }
    const int32_t st = StackOf(it);
    stacked |= st >= 0;
    items.push_back(Pack(StateOf(it), st >= 0 ? kOpaque : -1));
  }
  if (!stacked) return s;
  std::sort(items.begin(), items.end());
  items.erase(std::unique(items.begin(), items.end()), items.end());
  return AddState(std::move(items), cut, hole);
}

Status Pda::CheckLeftRecursion(const Nfa& nfa) {
  const size_t n = nfa.num_states(), rules = nfa.rule_start.size();
  std::vector<std::vector<std::pair<int32_t, int32_t>>> calls_at(n);
  for (const Nfa::Call& c : nfa.calls)
    calls_at[static_cast<size_t>(c.from)].push_back({c.rule, c.ret});
  std::vector<bool> nullable(rules, false);
  std::vector<uint32_t> mark(n, 0);
  uint32_t gen = 0;
  // From rule r's start without reading: the rules it may call (into *left); whether its
  // accepting state is reached.
  auto explore = [&](size_t r, std::vector<int32_t>* left) {
    ++gen;
    bool reached = false;
    std::vector<int32_t> stack = {nfa.rule_start[r]};
    while (!stack.empty()) {
      const int32_t q = stack.back();
      stack.pop_back();
      if (mark[static_cast<size_t>(q)] == gen) continue;
      mark[static_cast<size_t>(q)] = gen;
      if (q == nfa.rule_accept[r]) reached = true;
      for (int32_t y : nfa.eps[static_cast<size_t>(q)]) stack.push_back(y);
      for (const auto& [callee, ret] : calls_at[static_cast<size_t>(q)]) {
        if (left) left->push_back(callee);
        if (nullable[static_cast<size_t>(callee)]) stack.push_back(ret);
      }
    }
    return reached;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules; ++r) {
      if (!nullable[r] && explore(r, nullptr)) nullable[r] = changed = true;
    }
  }
  std::vector<std::vector<int32_t>> left(rules);
  for (size_t r = 0; r < rules; ++r) explore(r, &left[r]);
  // A cycle in "calls before reading".
  std::vector<int> color(rules, 0);
  std::vector<int32_t> path;
  std::string cycle;
  auto dfs = [&](auto&& self, int32_t r) -> bool {
    color[static_cast<size_t>(r)] = 1;
    path.push_back(r);
    for (int32_t t : left[static_cast<size_t>(r)]) {
      if (color[static_cast<size_t>(t)] == 1) {
        auto from = std::find(path.begin(), path.end(), t);
        for (auto it = from; it != path.end(); ++it)
          cycle += nfa.rule_names[static_cast<size_t>(*it)] + " -> ";
        cycle += nfa.rule_names[static_cast<size_t>(t)];
        return true;
      }
      if (color[static_cast<size_t>(t)] == 0 && self(self, t)) return true;
    }
    path.pop_back();
    color[static_cast<size_t>(r)] = 2;
    return false;
  };
  for (size_t r = 0; r < rules; ++r) {
    if (color[r] == 0 && dfs(dfs, static_cast<int32_t>(r))) {
      return InvalidArgument("left recursion: a rule calls itself before reading anything (" +
                             cycle + ")");
    }
  }
  return Status::Ok();
}

}  // namespace sluice::structured
