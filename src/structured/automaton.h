// Structured outputs, layer 1: expressions over bytes and code points, compiled to a byte-level
// NFA and run as a lazily built DFA.
//
// Every constraint (a regex, a JSON Schema, a choice list) is compiled to one Expr tree, which
// is emitted once into an Nfa over bytes (code-point classes are expanded into their UTF-8
// byte sequences, so the automaton never accepts invalid UTF-8). The Dfa builds its states on
// demand (subset construction as the input walks the automaton), so compiling is linear in the
// size of the expression and only the states a generation or a token-mask walk visits exist.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::structured {

struct Expr;
using ExprP = std::shared_ptr<const Expr>;

// The rules a recursive constraint calls (a $ref cycle, a recursive grammar rule, a free JSON
// value's nested containers): bodies[i] is rule i, filled in while compiling (a kRef names its
// rule by index, so rules may refer to each other and to themselves without owning cycles).
struct RuleSet {
  std::vector<ExprP> bodies;
  std::vector<std::string> names;  // for errors
  int Add(std::string name) {
    bodies.emplace_back();
    names.push_back(std::move(name));
    return static_cast<int>(bodies.size() - 1);
  }
};

// Closed ranges [lo, hi] of bytes (kBytes) or Unicode scalar values (kCodepoints).
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Expr {
  enum class Kind {
    kEmpty,       // the empty string
    kNothing,     // no string at all
    kBytes,       // one byte in `ranges`
    kCodepoints,  // one code point in `ranges`, as its UTF-8 bytes (surrogates never match)
    kConcat,      // kids in order
    kAlt,         // any of kids
    kRepeat,      // kids[0] repeated min..max times (max < 0: unbounded)
    kList,        // kids[0] (kids[1] kids[0]){min-1..max-1}, or empty when min == 0
    kObject,      // JSON object members in a fixed order (ObjectSpec)
    kAnd,         // strings both kids match (emitted as the product of their DFAs)
    kAndNot,      // strings kids[0] matches and kids[1] does not (the same product)
    kRef,         // rule `min` of `ref_rules`: a call into a sub-automaton (pushdown)
    kRules,       // kids[0], owning the rules its kRef nodes call (`rules`)
  };
  Kind kind = Kind::kEmpty;
  Ranges ranges;
  std::vector<ExprP> kids;
  int min = 0, max = -1;
  // kObject: open kids[0], separator kids[1], close kids[2]; then member i is kids[3 + i]
  // (required[i]); `extra` (may be null) is a member that may repeat after the declared ones;
  // min/max bound the number of members (-1: none).
  std::vector<bool> required;
  ExprP extra;
  std::weak_ptr<RuleSet> ref_rules;  // kRef
  std::shared_ptr<RuleSet> rules;    // kRules
  bool has_ref = false;              // a kRef somewhere below (or here)
};

// Constructors (simplifying where trivial).
ExprP Empty();
ExprP Nothing();
ExprP Bytes(Ranges r);
ExprP Byte(uint8_t b);
ExprP Codepoints(Ranges r);
ExprP Literal(std::string_view bytes);
ExprP Concat(std::vector<ExprP> kids);
ExprP Alt(std::vector<ExprP> kids);
ExprP Repeat(ExprP e, int min, int max);
ExprP Optional(ExprP e);
ExprP Star(ExprP e);
ExprP List(ExprP item, ExprP sep, int min, int max);
ExprP And(ExprP a, ExprP b);
ExprP AndNot(ExprP a, ExprP b);
struct ObjectMember {
  ExprP expr;  // the whole member: key, colon, value
  bool required = false;
};
// A call of rule `index` (recursion: the automaton pushes the return state on a stack).
// `approx` (may be null: any bytes): a finite superset of the rule's language, emitted for the
// call where a finite automaton is built (BuildNfa without pushdown) and the body is unknown.
ExprP Ref(const std::shared_ptr<RuleSet>& rules, int index, ExprP approx = nullptr);
// The root of a constraint whose expression calls rules (owns them).
ExprP WithRules(ExprP main, std::shared_ptr<RuleSet> rules);
ExprP Object(ExprP open, ExprP sep, ExprP close, std::vector<ObjectMember> members, ExprP extra,
             int min_members, int max_members);

// Sorted, merged ranges; and the complement within [0, limit].
Ranges Normalize(Ranges r);
Ranges Complement(const Ranges& r, uint32_t limit);

// An NFA over bytes with epsilon moves; one start and one accepting state.
struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int32_t to;
  };
  std::vector<std::vector<Edge>> edges;
  std::vector<std::vector<int32_t>> eps;
  int32_t start = 0, accept = 0;
  // Pushdown NFAs (BuildNfa with pushdown): rule i is the fragment rule_start[i] ->
  // rule_accept[i]; a call at state `from` enters rule `rule` and, when it accepts, goes on at
  // `ret`. Empty for finite automata.
  struct Call {
    int32_t from, rule, ret;
  };
  std::vector<Call> calls;
  std::vector<int32_t> rule_start, rule_accept;
  std::vector<std::string> rule_names;
  // Counted repetitions (a bounded kRepeat of a non-empty, call-free kid with at least
  // kMinCountedCopies copies, e.g. a string's maxLength), unrolled into `copies` blocks of
  // `stride` consecutive states: block k (1-based) = [begin + (k-1) stride, begin + k stride)
  // holds c_k, the state after k copies, and the states inside copy k-1 (those after k-1
  // copies). Every block has the same layout, so the same offset in two blocks is the same
  // place in the kid. c_k leaves the repetition iff k >= min; it starts another copy iff k <
  // copies. `bytes`: every byte a copy can read (bit b of word b / 64). Token masks use this to
  // share the mask of positions no token can tell apart (token_mask.h).
  struct Counted {
    int32_t begin = 0, stride = 0;
    int copies = 0, min = 0;
    std::array<uint64_t, 4> bytes{};
  };
  std::vector<Counted> counted;
  bool pushdown() const { return !calls.empty(); }
  int32_t AddState() {
    edges.emplace_back();
    eps.emplace_back();
    return static_cast<int32_t>(edges.size() - 1);
  }
  size_t num_states() const { return edges.size(); }
};

// Fewer copies than this are not recorded as Nfa::Counted (no mask to share).
inline constexpr int kMinCountedCopies = 16;

struct CompileLimits {
  size_t max_nfa_states = 2'000'000;
  size_t max_dfa_states = 200'000;
  // Token masks share the masks of counted positions (token_mask.h); off only to measure it.
  bool share_counted_masks = true;
};

// Emits the expression; ResourceExhausted when the NFA would exceed the limit. With `pushdown`,
// kRef nodes become calls (Nfa::calls; run it with a Pda, pushdown.h); without, a finite
// over-approximation (a superset) is emitted: the called rule's body one level deep, any bytes
// below. A kRef under an intersection is refused (InvalidArgument) in pushdown mode.
StatusOr<std::shared_ptr<const Nfa>> BuildNfa(const ExprP& e, const CompileLimits& limits = {},
                                              bool pushdown = false);

// The bytes some edge of NFA state q reads, added to a 256-bit set (bit b of word b / 64).
void AddReadBytes(const Nfa& nfa, int32_t q, std::array<uint64_t, 4>* bytes);
// Appends a new state's row of transitions (one per class, `class_rep` a byte of each): -1
// (dead) for the classes whose byte is not in `reads`, -2 (not yet computed) for the others.
// About half of the transitions a mask walk asks for are thus known dead without a look-up.
void AppendTransitionRow(const std::array<uint64_t, 4>& reads,
                         const std::vector<uint8_t>& class_rep, std::vector<int32_t>* table);

// Byte classes: bytes no edge of the NFA tells apart share a class. Fills cls[256] and a
// representative byte of each class; returns the number of classes.
int ByteClasses(const Nfa& nfa, uint8_t* cls, std::vector<uint8_t>* reps);

// A DFA over bytes built lazily from an Nfa. Not thread-safe but for NextShared: its owner (a
// compiled constraint) serialises walks, or lets several threads walk with NextShared only.
class Dfa {
 public:
  static constexpr int32_t kDead = -1;
  Dfa(std::shared_ptr<const Nfa> nfa, size_t max_states);

  int32_t start() const { return start_; }
  // The state after byte b (kDead: no string continues this way). When the state limit is
  // reached, returns kDead and sets overflowed().
  int32_t Next(int32_t s, uint8_t b);
  // Runs a byte string from s (kDead as soon as one byte is refused).
  int32_t Run(int32_t s, std::string_view bytes);
  bool Accepting(int32_t s) const { return s >= 0 && accepting_[static_cast<size_t>(s)]; }
  // True when some byte leads somewhere from s (else only the end of input is possible).
  bool HasNext(int32_t s);
  bool Matches(std::string_view bytes) { return Accepting(Run(start_, bytes)); }
  size_t num_states() const;
  bool overflowed() const { return overflowed_; }
  int num_classes() const { return num_classes_; }
  const uint8_t* byte_class() const { return byte_class_; }
  // The transitions [state][class of byte], kUnknownNext where not yet computed (valid until
  // the next Next, which may add states): the mask walk's inner loop reads them directly.
  static constexpr int32_t kUnknownNext = -2;
  const int32_t* table() const { return table_.data(); }
  // Next for several threads at once, while nothing else uses the Dfa (its owner's shared
  // lock): known transitions read without a lock, a new one computed under a mutex of its own;
  // kUnknownNext (nothing done) when a new state would not fit the room Reserve made.
  int32_t NextShared(int32_t s, uint8_t b);
  // Room for `states` more states before the transition table moves (NextShared's readers
  // hold no lock); called while nothing else uses the Dfa.
  void Reserve(size_t states);
  // NfaStates and Intern beside NextShared (under its mutex; Intern gives kUnknownNext when a
  // new state has no room), and whether the state limit was met.
  std::vector<int32_t> NfaStatesShared(int32_t s);
  int32_t InternShared(std::vector<int32_t> states);
  bool OverflowedShared();
  // Next with the known-transition lookup inlined (the mask walk's fast path).
  int32_t NextFast(int32_t s, uint8_t b) {
    const int32_t t = table_[static_cast<size_t>(s) * num_classes_ + byte_class_[b]];
    return t != kUnknown ? t : Next(s, b);
  }
  // The NFA states of s, and the state of a set of NFA states (made when new; kDead at the
  // state limit).
  const std::vector<int32_t>& NfaStates(int32_t s) const { return sets_[static_cast<size_t>(s)]; }
  int32_t Intern(std::vector<int32_t> states);

 private:
  static constexpr int32_t kUnknown = kUnknownNext;
  int32_t AddState(std::vector<int32_t> set);
  void Closure(std::vector<int32_t>* set);

  std::shared_ptr<const Nfa> nfa_;
  size_t max_states_;
  uint8_t byte_class_[256];
  std::vector<uint8_t> class_rep_;  // a byte of each class
  int num_classes_ = 0;
  std::vector<std::vector<int32_t>> sets_;
  std::vector<bool> accepting_;
  std::vector<int8_t> has_next_;  // -1 unknown
  std::vector<int32_t> table_;    // [state][class]
  struct SetHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };
  std::unordered_map<std::vector<int32_t>, int32_t, SetHash> ids_;
  std::vector<uint32_t> mark_;
  uint32_t mark_gen_ = 0;
  int32_t start_ = 0;
  bool overflowed_ = false;
  std::mutex shared_mu_;  // NextShared's computations
};

// Appends the UTF-8 encoding of a code point.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace sluice::structured
