// Structured outputs, layer 3: token masks. A TokenTrie holds a tokenizer's vocabulary as byte
// strings (built once per tokenizer); a Grammar is a compiled constraint (Expr -> NFA -> lazy
// DFA) bound to a trie. The mask of a DFA state — which token ids may come next — is computed
// by walking the trie and the DFA together (a subtree is cut as soon as the DFA refuses its
// prefix) and cached per state: the DFA state is all the context a mask depends on. End-of-
// sequence tokens are allowed exactly in accepting states. A recursive constraint runs on a
// Pda instead (pushdown.h): its states are configurations (automaton state and whole stack),
// walked and cached the same way, so a token may cross any number of calls and returns.
//
// Fast paths (identical masks; tests/unit/structured/mask_diff_test.cc checks them against
// ReferenceMask, the plain walk):
// - First byte to a common state: when most first bytes lead from x to one state T (inside a
//   string: T = x; typing a key among many optional ones: every byte that leaves all the keys
//   leads to the same "any other key" state), the mask of x is T's after-first-byte mask
//   (After: the tokens whose bytes after the first are allowed from T, cached per T) less the
//   subtrees of the other first bytes, which are walked apart. Where T loops to itself on a
//   byte set L (a string's plain characters, a key's), After(T) is T's whole walk from the
//   trie's ExitForest of L (kept per trie and so shared by every grammar): the tokens of L*,
//   and per byte b outside L one walk from Next(T, b) of the merged rests of every token
//   whose first byte outside L is b. Inside the subtrees walked apart, a node entered in T by
//   bytes of L takes its subtree's bits from that walk (T reads the rest as from the root).
// - Counted positions (Nfa::Counted: a string's maxLength, a regex's {m,n}): position k of a
//   repetition and position j are told apart only by a token that reaches a bound (min or the
//   last copy) from one and not from the other; a token reads at most D bytes inside the
//   repetition (D = the longest token prefix made of bytes a copy can read) and each copy takes
//   at least one byte. So every position from which neither bound is within D copies (and the
//   same for the positions before min) has one mask: the state's positions are shifted to the
//   first such position (Canonical) and the mask is computed and cached once for all of them.
//   D leaves out the few longest tokens (TokenTrie::Reach: a vocabulary's runs of 64 spaces
//   would otherwise keep D far above its other tokens); their bits are decided by running each
//   from the real state.
// - Stack-independent masks (pushdown): a configuration's mask is computed once for its
//   abstract configuration (Pda::Abstract: the stacks below the top replaced by an opaque
//   frame) and shared by every configuration with the same top; only the tokens whose walk
//   returns into the opaque frame (a `}` that closes the caller) are walked again against the
//   real stack.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/automaton.h"
#include "structured/pushdown.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::structured {

class TokenTrie {
 public:
  // tokens[id]: the bytes token id decodes to (nullopt: never allowed, e.g. special tokens);
  // vocab_size: the mask width (the model's vocabulary, >= tokens.size()); eos: the ids that end
  // a sequence.
  static std::shared_ptr<const TokenTrie> Build(
      const std::vector<std::optional<std::string>>& tokens, int vocab_size,
      std::vector<int32_t> eos);
  // From a byte-level tokenizer (FailedPrecondition for other decoders).
  static StatusOr<std::shared_ptr<const TokenTrie>> FromTokenizer(const Tokenizer& tok,
                                                                  int vocab_size,
                                                                  std::vector<int32_t> eos);

  int vocab_size() const { return vocab_size_; }
  int words() const { return (vocab_size_ + 31) / 32; }
  const std::vector<int32_t>& eos() const { return eos_; }
  bool IsEos(int32_t id) const;
  // The bytes of a token (nullptr when it is never allowed).
  const std::string* bytes(int32_t id) const;
  size_t num_nodes() const { return child_begin_.size() - 1; }
  size_t num_tokens() const { return num_tokens_; }
  // The longest token's length in bytes (the trie's depth).
  uint32_t max_depth() const { return max_depth_; }

  // For a byte set L (bit b of word b / 64): the tokens whose bytes after the first are all in L
  // (a mask of words() words) and the edges whose byte is not in L from the nodes (not the
  // root) reached that way.
  using ByteSet = std::array<uint64_t, 4>;
  struct LoopCover {
    std::vector<uint32_t> mask;
    std::vector<uint32_t> exits;  // edge indices
  };
  // Computed once per set and kept (the kMaxLoopCovers latest sets: a server that has seen
  // more string classes than that recomputes the oldest when they come back).
  std::shared_ptr<const LoopCover> Cover(const ByteSet& l) const;
  static constexpr size_t kMaxLoopCovers = 256;
  // For a byte set L, every token split at its first byte not in L (the exit byte): the tokens
  // with no such byte (`all_in`, a mask), and per exit byte b a forest merging the subtrees
  // below every edge of byte b from a node whose bytes are all in L (the root included). A
  // state x that loops to itself on L reaches every exit of byte b in one state, Next(x, b),
  // so the rest of the tokens is walked once per distinct suffix, not once per exit.
  struct ExitForest {
    std::vector<uint32_t> all_in;
    // Node r of the forest: depth_[r] (0: a group's root, one per exit byte), its subtree
    // [r, end[r]), the byte into it, the trie nodes it merges (trie[trie_begin[r] ..
    // trie_begin[r + 1])) and their tokens (toks[tok_begin[r] .. tok_begin[r + 1])).
    std::vector<uint32_t> depth, end, trie_begin, trie, tok_begin;
    std::vector<int32_t> toks;
    // A forest leaf that stands for one trie node's whole subtree (nothing merged below it):
    // below[r] is that trie node, walked in the trie itself (kNoSubtree: none).
    std::vector<uint32_t> below;
    static constexpr uint32_t kNoSubtree = ~0u;
    std::vector<uint8_t> byte;
    std::vector<uint32_t> roots;  // the groups' roots
  };
  // Kept per set like covers.
  std::shared_ptr<const ExitForest> Exits(const ByteSet& l) const;
  // How far tokens reach into a run of bytes of l: `depth` is the longest prefix of bytes in l
  // among all tokens but `longer`, the few tokens (at most kMaxReachExceptions) whose prefix in
  // l is longer still. Kept per set, like covers.
  struct Reach {
    uint32_t depth = 0;
    std::vector<int32_t> longer;
  };
  std::shared_ptr<const Reach> ReachWithin(const ByteSet& l) const;
  // How many tokens are longer than `bytes` (the first of by_length_).
  size_t TokensLongerThan(size_t bytes) const;
  static constexpr size_t kMaxReachExceptions = 512;

 private:
  friend class Grammar;
  int vocab_size_ = 0;
  size_t num_tokens_ = 0;
  std::vector<int32_t> eos_;
  std::vector<std::optional<std::string>> tokens_;
  // Node n's children are edges [child_begin_[n], child_begin_[n + 1]) (sorted by byte); the
  // tokens ending at node n are ids [tok_begin_[n], tok_begin_[n + 1]) of tok_ids_.
  std::vector<uint32_t> child_begin_;
  std::vector<uint8_t> edge_byte_;
  std::vector<uint32_t> edge_child_;
  std::vector<uint32_t> tok_begin_;
  std::vector<int32_t> tok_ids_;
  // The edge into node n (the root: none): its parent and byte. Node ids are in DFS order:
  // n's subtree is the nodes [n, end_[n]).
  std::vector<uint32_t> parent_, end_, depth_;
  std::vector<uint32_t> sub_depth_;  // the longest token in n's subtree (0: none)
  std::vector<int32_t> by_length_;   // token ids, longest first
  std::vector<uint32_t> node_of_;    // token id -> its node (0: none)
  std::vector<uint8_t> byte_;
  uint32_t max_depth_ = 0;
  template <typename T>
  using PerSet = std::vector<std::pair<ByteSet, std::shared_ptr<const T>>>;
  template <typename T>
  std::shared_ptr<const T> Find(const PerSet<T>& list, const ByteSet& l) const;
  template <typename T>
  std::shared_ptr<const T> Keep(PerSet<T>& list, const ByteSet& l,
                                std::shared_ptr<const T> v) const;
  mutable std::mutex cover_mu_;
  mutable PerSet<LoopCover> covers_;
  mutable PerSet<Reach> reaches_;
  mutable PerSet<ExitForest> forests_;
};

class Grammar {
 public:
  static constexpr int32_t kDead = Dfa::kDead;
  static StatusOr<std::shared_ptr<Grammar>> Create(const ExprP& e,
                                                   std::shared_ptr<const TokenTrie> trie,
                                                   const CompileLimits& limits = {});

  const TokenTrie& trie() const { return *trie_; }
  int32_t start() const { return start_; }
  // The allowed tokens at state s as a bitmask of trie().words() words (bit t of word t / 32).
  // ResourceExhausted when the automaton outgrows its state limit, or (pushdown) when s is
  // nested kMaxRecursionDepth calls deep and a deeper one could follow.
  Status FillMask(int32_t s, uint32_t* words);
  // The same mask by the plain walk (every edge from the root, no fast path, no cache): the
  // reference the fast paths are tested against.
  Status ReferenceMask(int32_t s, uint32_t* words);
  // The state after token t from s (kDead when t is not allowed there; EOS ids are kDead).
  int32_t Advance(int32_t s, int32_t t);
  bool Accepting(int32_t s);
  // Accepting with no way to go on: only the end of the sequence is left.
  bool Finished(int32_t s);
  // Whether bytes are a string of the language (for tests and the benchmark).
  bool Matches(std::string_view bytes);
  // The state after bytes from s (kDead when refused).
  int32_t Run(int32_t s, std::string_view bytes);
  size_t num_states();
  size_t nfa_states() const { return nfa_states_; }
  // A recursive constraint, run by a pushdown automaton.
  bool pushdown() const { return pda_ != nullptr; }
  // Pushdown constraints keep a configuration per distinct stack seen; past `threshold` states
  // the compiled-constraint cache hands new requests a fresh copy (running ones go on here).
  bool Worn(size_t threshold);
  // Bytes its caches of masks and walks hold now (they grow as states are visited, up to
  // kMaskCacheBytes; read without taking the grammar's lock).
  size_t CacheBytes() const;
  static constexpr size_t kMaskCacheBytes = 64u << 20;
  // Masks computed by a walk so far (FillMask calls that found no cached mask).
  size_t MaskWalks() const { return mask_walks_.load(std::memory_order_relaxed); }

 private:
  Grammar() = default;
  // A walk's result besides its mask: the trie nodes whose subtrees depend on the stack below
  // an opaque frame (walked again for real), the deepest configuration met (frames above the
  // opaque one), whether a call was cut for depth. Always empty / 0 / false for a Dfa.
  struct WalkOut {
    std::vector<uint32_t> mask;  // cached walks only (a state's own walk writes into words)
    std::vector<uint32_t> deps;
    int depth = 0;
    bool cut = false;
    // After only: the walk is the state's whole walk from the root (ExitWalk), the state
    // looping to itself on `loop`.
    bool whole = false;
    TokenTrie::ByteSet loop = {0, 0, 0, 0};
  };
  template <typename A>
  void PlainWalk(A& a, uint32_t node, int32_t s, uint32_t* words);
  // The walk from x: plain, or (when most first bytes lead to one state T) T's cached walk
  // after the first byte with the other first bytes walked apart.
  template <typename A>
  void Walk(A& a, int32_t x, uint32_t* words, WalkOut* out);
  // The tokens whose bytes after the first are allowed from t (t hole-free), cached per state;
  // where t loops to itself on a byte set, t's whole walk instead (WalkOut::whole: a token
  // whose first byte is in the set reads its later bytes from t as from the root).
  template <typename A>
  const WalkOut* After(A& a, int32_t t);
  // After for t inside a counted repetition (no loop there): the cover of the bytes that read
  // one more copy, with the tokens that outrun the copies left cleared and each exit walked from
  // t shifted by the copies read before it. False when t is not such a state.
  template <typename A>
  bool CountedAfter(A& a, int32_t t, uint32_t* words, WalkOut* out);
  // The walk from x where x loops to itself on a byte set L: the tokens of L*, and per exit
  // byte b the trie's ExitForest group walked once from Next(x, b).
  template <typename A>
  void ExitWalk(A& a, int32_t x, const TokenTrie::ByteSet& l, uint32_t* words, WalkOut* out);
  template <typename A>
  void Dfs(A& a, uint32_t* words, WalkOut* out);
  // Node c entered in state y (alive): its tokens and its subtree walked, or (only the hole)
  // c noted as stack-dependent.
  template <typename A>
  void Enter(A& a, uint32_t c, int32_t y, uint32_t* words, WalkOut* out);
  // The subtree below `root` (not its own tokens) from state s, scanned in node order (a dead
  // prefix skips its subtree), with Dfs's rules for holes.
  template <typename A>
  void Scan(A& a, uint32_t root, int32_t s, bool tainted, uint32_t* words, WalkOut* out) {
    if (jump_) {
      ScanTree<A, true>(a, nullptr, root, s, tainted, words, out);
    } else {
      ScanTree<A, false>(a, nullptr, root, s, tainted, words, out);
    }
  }
  // Scan over the trie (f null) or over an ExitForest f (a stack-dependent forest node notes
  // every trie node it merges). kJump: a node entered in jump_'s state by bytes all in its loop
  // set, untainted, takes its subtree's bits from jump_'s whole walk (the state loops on those
  // bytes, so a token below reads the rest of its bytes as from the root).
  template <typename A, bool kJump>
  void ScanTree(A& a, const TokenTrie::ExitForest* f, uint32_t root, int32_t s, bool tainted,
                uint32_t* words, WalkOut* out);
  // The subtree of node n (its own tokens included) as in w's whole walk (w->whole).
  void JumpTo(uint32_t n, const WalkOut& w, uint32_t* words, WalkOut* out) const;
  const WalkOut* jump_ = nullptr;
  int32_t jump_state_ = -1;
  void PdaMask(int32_t s, uint32_t* words);
  void MarkTokens(uint32_t node, uint32_t* words) const;
  void ClearSubtree(uint32_t node, uint32_t* words) const;
  void AddEos(bool accepting, uint32_t* words) const;

  std::shared_ptr<const TokenTrie> trie_;
  // The NFA's counted repetitions worth sharing masks in, with D (Canonical).
  struct CountedRun {
    Nfa::Counted c;
    std::shared_ptr<const TokenTrie::Reach> reach;
  };
  std::vector<CountedRun> counted_;  // at most kMaxCountedRuns
  static constexpr size_t kMaxCountedRuns = 64;
  static constexpr int32_t kUnknownCanonical = -2;
  struct Canon {
    int32_t state = kUnknownCanonical;
    uint64_t runs = 0;        // bit i: counted_[i] shifted s's states
    bool exceptions = false;  // some of those runs have Reach exceptions (or near is set)
    // A run s is near the end of (fewer than its D copies left): near_run's index, and the
    // prefix in its bytes up to which a token behaves at s as at the canonical state.
    int32_t near_run = -1;
    uint32_t near_within = 0;
  };
  std::mutex canon_mu_;           // canonical_ (Canonical runs under the shared lock too)
  std::vector<Canon> canonical_;  // per state
  // The state whose mask is s's but for the runs' Reach exceptions (Counted positions shifted;
  // s itself when none applies).
  // shared (a Dfa, under the shared lock): the Dfa read and grown by its *Shared methods; *ok
  // false when it has no room left for a new state (nothing is kept; ask again exclusively).
  Canon Canonical(int32_t s, bool shared = false, bool* ok = nullptr);
  // The mask of s from its canonical state's: the Reach exceptions of the runs that moved it
  // walked from s itself.
  Status SharedMask(int32_t s, const Canon& c, uint32_t* words);
  // The bits of the tokens whose prefix in run's bytes is longer than `within`, by a walk
  // from s of only the trie's paths to such tokens.
  // st and in_run: scratch of at least the trie's max depth + 2 entries.
  template <typename A>
  void NearWalk(A& a, int32_t s, const TokenTrie::ByteSet& run, uint32_t within, uint32_t* words,
                int32_t* st, uint32_t* in_run);
  // SharedMask's exceptions (words holding the canonical mask) walked on a Dfa under the shared
  // lock (several threads at once, Dfa::NextShared): false, words half done, when the Dfa
  // outgrew the room Reserve made (the caller walks again under the exclusive lock).
  bool SharedExceptionWalk(int32_t s, const Canon& c, uint32_t* words);
  static constexpr size_t kSharedWalkStates = 4096;
  // s's mask by its own walk, cached.
  Status OwnMask(int32_t s, uint32_t* words);
  void CacheMask(int32_t s, const uint32_t* words);
  // Copies s's cached mask into words (false: none cached).
  bool CachedMask(int32_t s, uint32_t* words);
  // The cached mask FillMask would give s, found under cache_mu_ only and copied outside it
  // (false: not known yet; the caller takes the slow path).
  bool FastMask(int32_t s, uint32_t* words);
  // Notes that s's mask is cached under `key` (itself or its canonical state), for FastMask.
  void NoteKey(int32_t s, int32_t key);
  // ResourceExhausted once the automaton has outgrown its state limit.
  Status StateLimit() const;
  static Status StateLimitError();
  std::atomic<size_t> mask_walks_{0};
  std::unique_ptr<Dfa> dfa_;
  std::unique_ptr<Pda> pda_;
  int32_t start_ = 0;
  size_t nfa_states_ = 0;
  // Exclusive: everything that walks or grows the automaton and the caches. Shared: the
  // exception walks of a Dfa (SharedExceptionWalk), several threads at once.
  std::shared_mutex mu_;
  // Masks of states, most recently used first, bounded in bytes. Changed under mu_ (exclusive)
  // and cache_mu_; read and reordered under cache_mu_ alone by FastMask. A mask is shared, so
  // a reader copies it outside the lock even if it is evicted meanwhile.
  using MaskP = std::shared_ptr<const std::vector<uint32_t>>;
  MaskP FindMaskLocked(int32_t key);
  std::mutex cache_mu_;
  std::list<std::pair<int32_t, MaskP>> lru_;
  std::unordered_map<int32_t, std::list<std::pair<int32_t, MaskP>>::iterator> cache_;
  std::vector<int32_t> fast_key_;  // per state: the cache key of its mask (-1: not known)
  size_t max_cached_ = 0;
  // Walks of abstract configurations (Pda::Abstract) and after-first-byte walks (After), the
  // same way; within the same byte bound.
  using WalkLru = std::list<std::pair<int32_t, WalkOut>>;
  WalkLru abs_lru_, after_lru_;
  std::unordered_map<int32_t, WalkLru::iterator> abs_cache_, after_cache_;
  size_t max_walks_ = 0;
  std::atomic<size_t> cached_entries_{0};  // masks + walks held, updated under mu_
  void CountEntries() {
    cached_entries_.store(cache_.size() + abs_cache_.size() + after_cache_.size(),
                          std::memory_order_relaxed);
  }
  std::vector<std::pair<uint32_t, int32_t>> stack_;
  struct DfsItem {
    uint32_t node;
    int32_t state;
    bool tainted;
  };
  std::vector<DfsItem> dfs_;
  std::vector<int32_t> scan_state_;
  std::vector<uint8_t> scan_taint_;
  std::vector<int32_t> scan_state_alt_;  // a trie walk nested in a forest walk (ScanTree)
  std::vector<uint8_t> scan_taint_alt_;
  std::vector<uint8_t> scan_in_;
  std::vector<std::pair<uint32_t, int32_t>> path_;
  std::vector<uint32_t> chain_;
};

}  // namespace sluice::structured
