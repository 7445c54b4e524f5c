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
//
// Token masks (token_mask.h) also walk *abstract* configurations (Abstract): a configuration's
// items with every non-empty stack replaced by one opaque frame that stands for "some stack,
// unknown". A walk from it is the walk from every configuration with the same items at the top:
// where it would return into the opaque frame it keeps a hole item instead (HasHole), so a
// token's walk that never meets a hole is decided by the top alone and one walk serves every
// stack below.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
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
  // The mask walk's inner loop reads the transition table and a word per state directly
  // (valid until the next Next, which may add states): transitions [state][class of byte],
  // kUnknownNext where not yet computed; Info bits: kInfoHole, kInfoItems, kInfoCut, and the
  // depth (Depth) from bit 8.
  static constexpr int32_t kUnknownNext = -2;
  static constexpr uint32_t kInfoHole = 1, kInfoItems = 2, kInfoCut = 4;
  const int32_t* table() const { return table_.data(); }
  const uint32_t* info() const { return info_.data(); }
  const uint8_t* byte_class() const { return byte_class_; }
  int num_classes() const { return num_classes_; }
  int32_t Run(int32_t s, std::string_view bytes);
  bool Accepting(int32_t s) const { return s >= 0 && accepting_[static_cast<size_t>(s)]; }
  bool HasNext(int32_t s);
  bool Matches(std::string_view bytes) { return Accepting(Run(start_, bytes)); }
  // A call deeper than kMaxRecursionDepth was left out of configuration s.
  bool AtLimit(int32_t s) const { return s >= 0 && at_limit_[static_cast<size_t>(s)]; }
  // The deepest stack among s's items (frames above the opaque one for abstract
  // configurations).
  int Depth(int32_t s) const { return s >= 0 ? depth_[static_cast<size_t>(s)] : 0; }
  // s with every non-empty stack replaced by the opaque frame (s itself when all its items are
  // on the empty stack): the walk from it is the walk from s wherever it meets no hole. kDead
  // at the state limit.
  int32_t Abstract(int32_t s);
  // Some walk into s returned into the opaque frame (abstract walks only).
  bool HasHole(int32_t s) const { return s >= 0 && (flags_[static_cast<size_t>(s)] & kHoleFlag); }
  // s has items besides the hole and cut markers (it reads on or accepts).
  bool HasItems(int32_t s) const { return s >= 0 && (flags_[static_cast<size_t>(s)] & kItemsFlag); }
  // The NFA state of each item of s (markers left out), and the configuration whose items are
  // those of s with their states replaced one for one by `states` (stacks and markers kept;
  // made when new; kDead at the state limit).
  std::vector<int32_t> ItemStates(int32_t s) const;
  int32_t Remap(int32_t s, const std::vector<int32_t>& states);
  size_t num_states() const { return sets_.size(); }
  size_t num_rules() const { return nfa_->rule_start.size(); }
  bool overflowed() const { return overflowed_; }

 private:
  static constexpr int32_t kUnknown = kUnknownNext;
  static constexpr int32_t kOpaque = 0;         // frames_[0]: the unknown rest of a stack
  static constexpr uint64_t kHoleItem = ~1ull;  // a return into the opaque frame
  static constexpr uint64_t kCutItem = ~0ull;   // a call was left out for depth
  static int32_t StateOf(uint64_t it) { return static_cast<int32_t>(it >> 32); }
  static int32_t StackOf(uint64_t it) {
    return static_cast<int32_t>(static_cast<uint32_t>(it)) - 1;
  }
  static constexpr uint8_t kHoleFlag = 1, kItemsFlag = 2;
  struct Frame {
    int32_t ret, below, depth;
  };
  static uint64_t Pack(int32_t q, int32_t stack) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(q)) << 32) |
           static_cast<uint32_t>(stack + 1);
  }
  int32_t Push(int32_t ret, int32_t below);
  // Epsilon moves, calls and returns; keeps the items that read bytes (or accept). Sets *cut
  // when a call was left out for depth, *hole when a return popped the opaque frame.
  void Closure(std::vector<uint64_t>* items, bool* cut, bool* hole);
  // The closure of one item, memoised: a transition's closure is the union of its targets'
  // (Next), and the same targets recur from many configurations (a string's characters, a key's
  // next byte), so most transitions to a configuration met before cost a few look-ups.
  struct SeedClosure {
    std::vector<uint64_t> items;
    bool cut = false, hole = false;
  };
  const SeedClosure& ClosureOf(uint64_t seed);
  // Past this many items held the memo starts over (8 bytes each).
  static constexpr size_t kMaxSeedClosureItems = 1 << 20;
  size_t seed_closure_items_ = 0;
  // Closure's visited items: open addressing with generation stamps (cleared in O(1), no
  // allocation per item).
  class SeenSet {
   public:
    bool Insert(uint64_t x);  // false when already there
    void Clear();

   private:
    static size_t Hash(uint64_t x) {
      return static_cast<size_t>((x * 0x9E3779B97F4A7C15ull) >> 20);
    }
    void Grow();
    std::vector<uint64_t> slots_;
    std::vector<uint32_t> gen_;
    uint32_t gen_now_ = 1;
    size_t size_ = 0;
  };
  // `items` sorted; copied only when the configuration is new.
  int32_t AddState(const std::vector<uint64_t>& items, bool cut, bool hole = false);

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
  std::vector<int32_t> depth_;
  std::vector<uint8_t> flags_;
  std::vector<uint32_t> info_;  // per state: the flags and depth, packed (info())
  std::vector<int8_t> has_next_;
  std::vector<int32_t> table_;
  struct SetHash {
    size_t operator()(const std::vector<uint64_t>& v) const;
  };
  std::unordered_map<std::vector<uint64_t>, int32_t, SetHash> ids_;
  SeenSet seen_;
  std::vector<uint64_t> work_;
  std::unordered_map<uint64_t, SeedClosure> seed_closures_;
  std::vector<uint64_t> seeds_, next_, key_;  // Next's and AddState's scratch
  int32_t start_ = 0;
  bool overflowed_ = false;
};

}  // namespace sluice::structured
