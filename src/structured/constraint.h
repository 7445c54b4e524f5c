// Structured outputs, the request-level view: what a request constrains its output to (a JSON
// Schema, any JSON object, a regex, a choice of strings, a grammar), compiled to a Grammar for
// a model's vocabulary, with compiled grammars cached per (constraint, tokenizer).
#pragma once

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
  explicit GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity = 128)
      : trie_(std::move(trie)), capacity_(capacity) {}
  const std::shared_ptr<const TokenTrie>& trie() const { return trie_; }
  // Compiled once per distinct constraint (least recently used ones dropped past capacity).
  // The start state's mask is computed here, on the caller's thread (a request thread when
  // serving), so a new constraint's first mask is not computed inside a generation step.
  StatusOr<std::shared_ptr<Grammar>> Get(const ConstraintSpec& spec);
  size_t hits() const { return hits_; }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<Grammar>>> lru_;
  std::unordered_map<std::string,
                     std::list<std::pair<std::string, std::shared_ptr<Grammar>>>::iterator>
      map_;
  size_t hits_ = 0;
};

}  // namespace sluice::structured
