// Structured outputs, the request-level view: what a request constrains its output to (a JSON
// Schema, any JSON object, a regex, a choice of strings, a grammar), compiled to a Grammar for
// a model's vocabulary, with compiled grammars cached per (constraint, tokenizer).
#pragma once

#include <algorithm>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/token_mask.h"

namespace sluice::structured {

struct ConstraintSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kToolCalls };
  Kind kind = Kind::kJsonObject;
  // kJsonSchema: the schema (JSON); kRegex: the pattern; kGrammar: the grammar; kToolCalls: the
  // tool calls (structured/tool_calls.h EncodeToolCallSpec)
  std::string text;
  std::vector<std::string> choices;  // kChoice
  // Whitespace between JSON tokens: a regex (guided_whitespace_pattern); unset = none (compact).
  std::optional<std::string> whitespace;
  std::string field;  // the request field it came from (errors name it)

  std::string Key() const;
};

// The constraint's language; InvalidArgument "<field>: <what is unsupported or wrong>".
StatusOr<ExprP> CompileConstraint(const ConstraintSpec& spec);

class GrammarCache {
 public:
  // shards: how many Grammar instances one constraint gets at most. A Grammar computes one
  // mask at a time (its automaton and mask caches grow as it walks), so requests sharing a
  // constraint would otherwise queue on it: with shards = the mask threads, the requests of a
  // constraint are spread round-robin over that many instances (each compiled on first use,
  // each with its own caches), and masks of one constraint run in parallel.
  explicit GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity = 128,
                        int shards = 1)
      : trie_(std::move(trie)), capacity_(capacity), shards_(std::max(1, shards)) {}
  const std::shared_ptr<const TokenTrie>& trie() const { return trie_; }
  // Compiled once per distinct constraint and shard (least recently used constraints dropped
  // past capacity). The start state's mask is computed here, on the caller's thread (a
  // request thread when serving), so a new constraint's most expensive mask is not computed
  // inside a generation step.
  StatusOr<std::shared_ptr<Grammar>> Get(const ConstraintSpec& spec);
  size_t hits() const { return hits_; }
  int shards() const { return shards_; }

 private:
  struct Entry {
    ExprP expr;
    std::vector<std::shared_ptr<Grammar>> shards;
    size_t next = 0;
  };
  using Lru = std::list<std::pair<std::string, Entry>>;
  StatusOr<std::shared_ptr<Grammar>> Create(const ConstraintSpec& spec, const ExprP& e);

  std::shared_ptr<const TokenTrie> trie_;
  size_t capacity_;
  int shards_;
  std::mutex mu_;
  Lru lru_;
  std::unordered_map<std::string, Lru::iterator> map_;
  size_t hits_ = 0;
};

}  // namespace sluice::structured
