// The lazily built DFA of automaton.h (subset construction on demand) and the byte classes
// it shares with the pushdown automaton.
#include <algorithm>

#include "structured/automaton.h"

namespace sluice::structured {

void AddReadBytes(const Nfa& nfa, int32_t q, std::array<uint64_t, 4>* bytes) {
  for (const Nfa::Edge& ed : nfa.edges[static_cast<size_t>(q)]) {
    for (int w = ed.lo >> 6; w <= ed.hi >> 6; ++w) {
      const int lo = std::max<int>(ed.lo, w * 64) - w * 64;
      const int hi = std::min<int>(ed.hi, w * 64 + 63) - w * 64;
      const uint64_t upto = hi == 63 ? ~0ull : (2ull << hi) - 1;
      (*bytes)[static_cast<size_t>(w)] |= upto & ~((1ull << lo) - 1);
    }
  }
}

void AppendTransitionRow(const std::array<uint64_t, 4>& reads,
                         const std::vector<uint8_t>& class_rep, std::vector<int32_t>* table) {
  for (uint8_t r : class_rep) table->push_back(((reads[r >> 6] >> (r & 63)) & 1) ? -2 : -1);
}

int ByteClasses(const Nfa& nfa, uint8_t* cls, std::vector<uint8_t>* reps) {
  bool boundary[257] = {};
  for (const auto& es : nfa.edges) {
    for (const Nfa::Edge& ed : es) {
      boundary[ed.lo] = true;
      boundary[ed.hi + 1] = true;
    }
  }
  int c = 0;
  reps->clear();
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && boundary[b]) ++c;
    cls[b] = static_cast<uint8_t>(c);
    if (static_cast<int>(reps->size()) == c) reps->push_back(static_cast<uint8_t>(b));
  }
  return c + 1;
}

size_t Dfa::SetHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

Dfa::Dfa(std::shared_ptr<const Nfa> nfa, size_t max_states)
    : nfa_(std::move(nfa)), max_states_(max_states) {
  num_classes_ = ByteClasses(*nfa_, byte_class_, &class_rep_);
  mark_.assign(nfa_->num_states(), 0);
  std::vector<int32_t> s = {nfa_->start};
  Closure(&s);
  start_ = AddState(std::move(s));
}

void Dfa::Closure(std::vector<int32_t>* set) {
  ++mark_gen_;
  std::vector<int32_t> stack = *set;
  set->clear();
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    if (mark_[static_cast<size_t>(x)] == mark_gen_) continue;
    mark_[static_cast<size_t>(x)] = mark_gen_;
    // Only states with byte edges (or the accepting state) tell sets apart.
    if (!nfa_->edges[static_cast<size_t>(x)].empty() || x == nfa_->accept) set->push_back(x);
    for (int32_t y : nfa_->eps[static_cast<size_t>(x)]) {
      if (mark_[static_cast<size_t>(y)] != mark_gen_) stack.push_back(y);
    }
  }
  std::sort(set->begin(), set->end());
}

int32_t Dfa::Intern(std::vector<int32_t> states) {
  std::sort(states.begin(), states.end());
  states.erase(std::unique(states.begin(), states.end()), states.end());
  return AddState(std::move(states));
}

int32_t Dfa::AddState(std::vector<int32_t> set) {
  if (set.empty()) return kDead;
  auto it = ids_.find(set);
  if (it != ids_.end()) return it->second;
  if (sets_.size() >= max_states_) {
    overflowed_ = true;
    return kDead;
  }
  const int32_t id = static_cast<int32_t>(sets_.size());
  accepting_.push_back(std::binary_search(set.begin(), set.end(), nfa_->accept));
  has_next_.push_back(-1);
  std::array<uint64_t, 4> reads{};
  for (int32_t q : set) AddReadBytes(*nfa_, q, &reads);
  AppendTransitionRow(reads, class_rep_, &table_);
  ids_.emplace(set, id);
  sets_.push_back(std::move(set));
  return id;
}

int32_t Dfa::Next(int32_t s, uint8_t b) {
  if (s < 0) return kDead;
  const size_t slot = static_cast<size_t>(s) * num_classes_ + byte_class_[b];
  if (table_[slot] != kUnknown) return table_[slot];
  const uint8_t rep = class_rep_[byte_class_[b]];
  std::vector<int32_t> next;
  for (int32_t x : sets_[static_cast<size_t>(s)]) {
    for (const Nfa::Edge& ed : nfa_->edges[static_cast<size_t>(x)]) {
      if (ed.lo <= rep && rep <= ed.hi) next.push_back(ed.to);
    }
  }
  int32_t t = kDead;
  if (!next.empty()) {
    Closure(&next);
    t = AddState(std::move(next));
  }
  // (Published for NextShared's lock-free readers after the new state's row.)
  if (!overflowed_ || t != kDead) __atomic_store_n(&table_[slot], t, __ATOMIC_RELEASE);
  return t;
}

int32_t Dfa::NextShared(int32_t s, uint8_t b) {
  if (s < 0) return kDead;
  int32_t* e = &table_[static_cast<size_t>(s) * num_classes_ + byte_class_[b]];
  int32_t t = __atomic_load_n(e, __ATOMIC_ACQUIRE);
  if (t != kUnknown) return t;
  std::lock_guard<std::mutex> lock(shared_mu_);
  t = __atomic_load_n(e, __ATOMIC_ACQUIRE);
  if (t != kUnknown) return t;
  // A new state appends a row: only within the capacity (readers hold pointers into it).
  if (table_.capacity() - table_.size() < static_cast<size_t>(num_classes_)) return kUnknown;
  return Next(s, b);
}

std::vector<int32_t> Dfa::NfaStatesShared(int32_t s) {
  std::lock_guard<std::mutex> lock(shared_mu_);
  return sets_[static_cast<size_t>(s)];
}

int32_t Dfa::InternShared(std::vector<int32_t> states) {
  std::lock_guard<std::mutex> lock(shared_mu_);
  if (table_.capacity() - table_.size() < static_cast<size_t>(num_classes_)) return kUnknown;
  return Intern(std::move(states));
}

bool Dfa::OverflowedShared() {
  std::lock_guard<std::mutex> lock(shared_mu_);
  return overflowed_;
}

void Dfa::Reserve(size_t states) {
  const size_t need = states * static_cast<size_t>(num_classes_);
  if (table_.capacity() - table_.size() >= need) return;
  table_.reserve(table_.size() + std::max(need, table_.size() / 2));
}

int32_t Dfa::Run(int32_t s, std::string_view bytes) {
  for (char c : bytes) {
    if (s < 0) return kDead;
    s = Next(s, static_cast<uint8_t>(c));
  }
  return s;
}

bool Dfa::HasNext(int32_t s) {
  if (s < 0) return false;
  int8_t& h = has_next_[static_cast<size_t>(s)];
  if (h >= 0) return h != 0;
  bool any = false;
  for (int c = 0; c < num_classes_ && !any; ++c)
    any = Next(s, class_rep_[static_cast<size_t>(c)]) >= 0;
  has_next_[static_cast<size_t>(s)] = any ? 1 : 0;
  return any;
}

size_t Dfa::num_states() const { return sets_.size(); }

}  // namespace sluice::structured
