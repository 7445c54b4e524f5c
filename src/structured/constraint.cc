#include "structured/constraint.h"

#include <algorithm>

#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/tool_calls.h"

namespace sluice::structured {

std::string ConstraintSpec::Key() const {
  std::string k = std::to_string(static_cast<int>(kind)) + "\x1f" + text;
  for (const std::string& c : choices) k += "\x1f" + std::to_string(c.size()) + ":" + c;
  if (whitespace) k += "\x1e" + *whitespace;
  return k;
}

StatusOr<ExprP> CompileConstraint(const ConstraintSpec& spec) {
  auto fail = [&](const Status& s) { return InvalidArgument(spec.field + ": " + s.message()); };
  JsonOptions jo;
  if (spec.whitespace) {
    auto ws = ParseRegex(*spec.whitespace, RegexMode::kFullMatch);
    if (!ws.ok()) return fail(ws.status());
    jo.ws = *ws;
  }
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonSchema: {
      auto e = CompileJsonSchema(spec.text, jo);
      if (!e.ok()) return fail(e.status());
      return *e;
    }
    case ConstraintSpec::Kind::kJsonObject:
      return JsonObjectExpr(jo);
    case ConstraintSpec::Kind::kRegex: {
      auto e = ParseRegex(spec.text, RegexMode::kFullMatch);
      if (!e.ok()) return fail(e.status());
      return *e;
    }
    case ConstraintSpec::Kind::kChoice: {
      if (spec.choices.empty()) return InvalidArgument(spec.field + ": needs at least one choice");
      std::vector<ExprP> alts;
      for (const std::string& c : spec.choices) alts.push_back(Literal(c));
      return Alt(std::move(alts));
    }
    case ConstraintSpec::Kind::kGrammar: {
      auto e = CompileGrammar(spec.text);
      if (!e.ok()) return fail(e.status());
      return *e;
    }
    case ConstraintSpec::Kind::kToolCalls: {
      // Errors name the tool's own field (tools[i].function.parameters).
      ASSIGN_OR_RETURN(ToolCallSpec tc, DecodeToolCallSpec(spec.text));
      return CompileToolCalls(tc, jo);
    }
  }
  return Internal("unknown constraint kind");
}

StatusOr<std::shared_ptr<Grammar>> GrammarCache::Get(const ConstraintSpec& spec) {
  const std::string key = spec.Key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    // A pushdown constraint's configurations grow with the stacks it has seen: past 100,000
    // new requests get a fresh copy (requests running on this one keep it).
    if (it != map_.end() && it->second->second->Worn(100'000)) {
      lru_.erase(it->second);
      map_.erase(it);
    } else if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      std::shared_ptr<Grammar> g = it->second->second;
      EvictLocked();  // grammars grow while they run: re-check the byte bound
      return g;
    }
  }
  ASSIGN_OR_RETURN(ExprP e, CompileConstraint(spec));
  auto g = Grammar::Create(e, trie_);
  if (!g.ok()) return InvalidArgument(spec.field + ": " + g.status().message());
  std::vector<uint32_t> words(static_cast<size_t>(trie_->words()));
  Status st = (*g)->FillMask((*g)->start(), words.data());  // kept in the grammar's cache
  if (!st.ok()) return InvalidArgument(spec.field + ": " + st.message());
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.count(key) == 0) {
    lru_.emplace_front(key, *g);
    map_[key] = lru_.begin();
    EvictLocked();
  }
  return *g;
}

void GrammarCache::EvictLocked() {
  size_t total = 0;
  for (const auto& [key, g] : lru_) total += g->CacheBytes();
  while (lru_.size() > 1 && (lru_.size() > capacity_ || total > max_bytes_)) {
    total -= std::min(total, lru_.back().second->CacheBytes());
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

size_t GrammarCache::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t GrammarCache::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [key, g] : lru_) total += g->CacheBytes();
  return total;
}

}  // namespace sluice::structured
