// Structured outputs, layer 3: token masks. A TokenTrie holds a tokenizer's vocabulary as byte
// strings (built once per tokenizer); a Grammar is a compiled constraint (Expr -> NFA -> lazy
// DFA) bound to a trie. The mask of a DFA state — which token ids may come next — is computed
// by walking the trie and the DFA together (a subtree is cut as soon as the DFA refuses its
// prefix) and cached per state: the DFA state is all the context a mask depends on. End-of-
// sequence tokens are allowed exactly in accepting states. A recursive constraint runs on a
// Pda instead (pushdown.h): its states are configurations (automaton state and whole stack),
// walked and cached the same way, so a token may cross any number of calls and returns.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
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

 private:
  Grammar() = default;
  template <typename A>
  void ComputeMask(A& a, int32_t s, uint32_t* words);

  std::shared_ptr<const TokenTrie> trie_;
  std::unique_ptr<Dfa> dfa_;
  std::unique_ptr<Pda> pda_;
  int32_t start_ = 0;
  size_t nfa_states_ = 0;
  std::mutex mu_;
  // Masks of states, most recently used first, bounded in bytes.
  std::list<std::pair<int32_t, std::vector<uint32_t>>> lru_;
  std::unordered_map<int32_t, std::list<std::pair<int32_t, std::vector<uint32_t>>>::iterator>
      cache_;
  size_t max_cached_ = 0;
  std::vector<std::pair<uint32_t, int32_t>> stack_;
};

}  // namespace sluice::structured
