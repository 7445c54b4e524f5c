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
  // At most `capacity` compiled constraints, and at most `max_bytes` of cached masks and walks
  // over all of them (Grammar::CacheBytes; each grammar also bounds its own to
  // Grammar::kMaskCacheBytes): past either, the least recently used grammars are dropped
  // (requests running on one keep it until they end). The most recently used one is never
  // dropped, so one grammar may alone exceed a max_bytes below kMaskCacheBytes.
  static constexpr size_t kDefaultMaxBytes = size_t{1} << 30;
  explicit GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t capacity = 128,
                        size_t max_bytes = kDefaultMaxBytes)
      : trie_(std::move(trie)), capacity_(capacity), max_bytes_(max_bytes) {}
  const std::shared_ptr<const TokenTrie>& trie() const { return trie_; }
  // Compiled once per distinct constraint (least recently used ones dropped past capacity).
  // The start state's mask is computed here, on the caller's thread (a request thread when
  // serving), so a new constraint's first mask is not computed inside a generation step.
  StatusOr<std::shared_ptr<Grammar>> Get(const ConstraintSpec& spec);
  size_t hits() const { return hits_; }
  size_t size();
  // Cached bytes of the grammars it holds (their Grammar::CacheBytes summed).
  size_t bytes();

 private:
  std::shared_ptr<const TokenTrie> trie_;
  size_t capacity_;
  size_t max_bytes_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<Grammar>>> lru_;
  std::unordered_map<std::string,
                     std::list<std::pair<std::string, std::shared_ptr<Grammar>>>::iterator>
      map_;
  size_t hits_ = 0;
  void EvictLocked();
};

}  // namespace sluice::structured
