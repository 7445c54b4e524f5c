// Structured outputs, layer 1b: the pushdown automaton that runs recursive constraints.
//
// A recursive constraint (a $ref cycle, a recursive grammar rule, a free JSON value's nested
// objects and arrays) is emitted as a pushdown NFA (automaton.h, BuildNfa with pushdown): each
// rule is its own fragment, and a call enters a rule's fragment with the return state pushed
// on a stack. A Pda runs it as a lazily built deterministic automaton whose states
// ("configurations") are sets of (NFA state, stack) items. Stacks are persistent and shared:
// a stack is a frame id, a frame is (return state, the frame below) interned once, so pushing,
// popping and comparing stacks are integer operations and a configuration is one int32 (cloning
// a sequence's state copies it). Configurations and their transitions are built on demand and
// memoised like the Dfa's states, so a token-mask walk can cross any number of calls and
// returns inside one token (`}]}`) and stays exact.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "structured/automaton.h"

namespace sluice::structured {

// The deepest nesting of calls a pushdown constraint follows (documented in
// docs/structured-outputs.md). A configuration that would need a deeper call is marked
// (AtLimit): masks of it fail the request instead of silently refusing the deeper value.
inline constexpr int kMaxRecursionDepth = 128;

class Pda {
 public:
  static constexpr int32_t kDead = -1;
  Pda(std::shared_ptr<const Nfa> nfa, size_t max_states);
  // InvalidArgument naming the rules when a rule can call itself before reading a byte (left
  // recursion: the stack would grow without input).
  static Status CheckLeftRecursion(const Nfa& nfa);

  int32_t start() const { return start_; }
  int32_t Next(int32_t s, uint8_t b);
  int32_t NextFast(int32_t s, uint8_t b) {
    const int32_t t = table_[static_cast<size_t>(s) * num_classes_ + byte_class_[b]];
    return t != kUnknown ? t : Next(s, b);
  }
  int32_t Run(int32_t s, std::string_view bytes);
  bool Accepting(int32_t s) const { return s >= 0 && accepting_[static_cast<size_t>(s)]; }
  bool HasNext(int32_t s);
  bool Matches(std::string_view bytes) { return Accepting(Run(start_, bytes)); }
  // A call deeper than kMaxRecursionDepth was left out of configuration s.
  bool AtLimit(int32_t s) const { return s >= 0 && at_limit_[static_cast<size_t>(s)]; }
  // The deepest stack among s's items (tests).
  int Depth(int32_t s) const;
  size_t num_states() const { return sets_.size(); }
  bool overflowed() const { return overflowed_; }

 private:
  static constexpr int32_t kUnknown = -2;
  struct Frame {
    int32_t ret, below, depth;
  };
  static uint64_t Pack(int32_t q, int32_t stack) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(q)) << 32) |
           static_cast<uint32_t>(stack + 1);
  }
  static int32_t StateOf(uint64_t it) { return static_cast<int32_t>(it >> 32); }
  static int32_t StackOf(uint64_t it) {
    return static_cast<int32_t>(static_cast<uint32_t>(it)) - 1;
  }
  int32_t Push(int32_t ret, int32_t below);
  // Epsilon moves, calls and returns; keeps the items that read bytes (or accept). Sets *cut
  // when a call was left out for depth.
  void Closure(std::vector<uint64_t>* items, bool* cut);
  int32_t AddState(std::vector<uint64_t> items, bool cut);

  std::shared_ptr<const Nfa> nfa_;
  size_t max_states_;
  uint8_t byte_class_[256];
  std::vector<uint8_t> class_rep_;
  int num_classes_ = 0;
  std::vector<uint32_t> call_begin_;  // calls of state q: call_[call_begin_[q] .. [q + 1])
  std::vector<Nfa::Call> call_;
  std::vector<uint8_t> tail_;     // call_[c] is a tail call (pushes nothing)
  std::vector<uint8_t> returns_;  // state q is a rule's accepting state
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<std::vector<uint64_t>> sets_;
  std::vector<bool> accepting_, at_limit_;
  std::vector<int8_t> has_next_;
  std::vector<int32_t> table_;
  struct SetHash {
    size_t operator()(const std::vector<uint64_t>& v) const;
  };
  std::unordered_map<std::vector<uint64_t>, int32_t, SetHash> ids_;
  std::unordered_set<uint64_t> seen_;
  std::vector<uint64_t> work_;
  int32_t start_ = 0;
  bool overflowed_ = false;
};

}  // namespace sluice::structured
