#include "structured/token_mask.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "tokenizer/tokenizer.h"

namespace sluice::structured {

namespace {
constexpr size_t kMaskCacheBytes = 64u << 20;  // per grammar
}

std::shared_ptr<const TokenTrie> TokenTrie::Build(
    const std::vector<std::optional<std::string>>& tokens, int vocab_size,
    std::vector<int32_t> eos) {
  auto t = std::make_shared<TokenTrie>();
  t->vocab_size_ = std::max<int>(vocab_size, static_cast<int>(tokens.size()));
  t->tokens_ = tokens;
  t->tokens_.resize(static_cast<size_t>(t->vocab_size_));
  t->eos_ = std::move(eos);
  std::sort(t->eos_.begin(), t->eos_.end());
  for (int32_t e : t->eos_) {  // EOS ids are never byte strings
    if (e >= 0 && e < t->vocab_size_) t->tokens_[static_cast<size_t>(e)].reset();
  }
  // Tokens sorted by bytes give the trie in DFS order.
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->tokens_.size(); ++i) {
    if (t->tokens_[i] && !t->tokens_[i]->empty()) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return *t->tokens_[static_cast<size_t>(a)] < *t->tokens_[static_cast<size_t>(b)];
  });
  t->num_tokens_ = ids.size();
  // Build with maps first (simple), then flatten.
  struct Node {
    std::map<uint8_t, uint32_t> kids;
    std::vector<int32_t> toks;
  };
  std::vector<Node> nodes(1);
  for (int32_t id : ids) {
    uint32_t cur = 0;
    for (char c : *t->tokens_[static_cast<size_t>(id)]) {
      const auto b = static_cast<uint8_t>(c);
      auto it = nodes[cur].kids.find(b);
      if (it == nodes[cur].kids.end()) {
        nodes.emplace_back();
        const auto n = static_cast<uint32_t>(nodes.size() - 1);
        nodes[cur].kids[b] = n;
        cur = n;
      } else {
        cur = it->second;
      }
    }
    nodes[cur].toks.push_back(id);
  }
  t->child_begin_.reserve(nodes.size() + 1);
  t->tok_begin_.reserve(nodes.size() + 1);
  for (const Node& n : nodes) {
    t->child_begin_.push_back(static_cast<uint32_t>(t->edge_byte_.size()));
    for (const auto& [b, c] : n.kids) {
      t->edge_byte_.push_back(b);
      t->edge_child_.push_back(c);
    }
    t->tok_begin_.push_back(static_cast<uint32_t>(t->tok_ids_.size()));
    t->tok_ids_.insert(t->tok_ids_.end(), n.toks.begin(), n.toks.end());
  }
  t->child_begin_.push_back(static_cast<uint32_t>(t->edge_byte_.size()));
  t->tok_begin_.push_back(static_cast<uint32_t>(t->tok_ids_.size()));
  return t;
}

StatusOr<std::shared_ptr<const TokenTrie>> TokenTrie::FromTokenizer(const Tokenizer& tok,
                                                                    int vocab_size,
                                                                    std::vector<int32_t> eos) {
  if (!tok.HasByteLevelDecoder()) {
    return FailedPrecondition(
        "structured outputs need a byte-level BPE tokenizer (tokenizer.json decoder ByteLevel)");
  }
  std::vector<std::optional<std::string>> tokens(tok.vocab_size());
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = tok.TokenBytes(static_cast<int32_t>(i));
  return Build(tokens, vocab_size, std::move(eos));
}

bool TokenTrie::IsEos(int32_t id) const { return std::binary_search(eos_.begin(), eos_.end(), id); }

const std::string* TokenTrie::bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return nullptr;
  const auto& t = tokens_[static_cast<size_t>(id)];
  return t ? &*t : nullptr;
}

StatusOr<std::shared_ptr<Grammar>> Grammar::Create(const ExprP& e,
                                                   std::shared_ptr<const TokenTrie> trie,
                                                   const CompileLimits& limits) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Nfa> nfa, BuildNfa(e, limits, /*pushdown=*/true));
  auto g = std::shared_ptr<Grammar>(new Grammar());
  g->nfa_states_ = nfa->num_states();
  if (nfa->pushdown()) {
    RETURN_IF_ERROR(Pda::CheckLeftRecursion(*nfa));
    g->pda_ = std::make_unique<Pda>(nfa, limits.max_dfa_states);
    g->start_ = g->pda_->start();
  } else {
    g->dfa_ = std::make_unique<Dfa>(nfa, limits.max_dfa_states);
    g->start_ = g->dfa_->start();
  }
  g->trie_ = std::move(trie);
  g->max_cached_ = std::max<size_t>(16, kMaskCacheBytes / (sizeof(uint32_t) * g->trie_->words()));
  return g;
}

template <typename A>
void Grammar::ComputeMask(A& d, int32_t s, uint32_t* words) {
  const TokenTrie& t = *trie_;
  std::memset(words, 0, sizeof(uint32_t) * static_cast<size_t>(t.words()));
  stack_.clear();
  stack_.emplace_back(0u, s);
  while (!stack_.empty()) {
    const auto [node, st] = stack_.back();
    stack_.pop_back();
    const uint32_t e_end = t.child_begin_[node + 1];
    for (uint32_t e = t.child_begin_[node]; e < e_end; ++e) {
      const int32_t ns = d.NextFast(st, t.edge_byte_[e]);
      if (ns < 0) continue;
      const uint32_t c = t.edge_child_[e];
      for (uint32_t k = t.tok_begin_[c]; k < t.tok_begin_[c + 1]; ++k) {
        const int32_t id = t.tok_ids_[k];
        words[id >> 5] |= 1u << (id & 31);
      }
      if (t.child_begin_[c + 1] > t.child_begin_[c]) stack_.emplace_back(c, ns);
    }
  }
  if (d.Accepting(s)) {
    for (int32_t id : t.eos()) {
      if (id >= 0 && id < t.vocab_size()) words[id >> 5] |= 1u << (id & 31);
    }
  }
}

Status Grammar::FillMask(int32_t s, uint32_t* words) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = static_cast<size_t>(trie_->words());
  auto it = cache_.find(s);
  if (it != cache_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    std::memcpy(words, it->second->second.data(), n * sizeof(uint32_t));
    return Status::Ok();
  }
  if (pda_ && pda_->AtLimit(s)) {
    return Status(StatusCode::kResourceExhausted,
                  "structured output: the output is nested " + std::to_string(kMaxRecursionDepth) +
                      " levels deep, the limit of recursive constraints");
  }
  if (pda_) {
    ComputeMask(*pda_, s, words);
  } else {
    ComputeMask(*dfa_, s, words);
  }
  if (pda_ ? pda_->overflowed() : dfa_->overflowed()) {
    return Status(StatusCode::kResourceExhausted,
                  "structured output: the constraint's automaton outgrew its state limit");
  }
  if (cache_.size() >= max_cached_) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(s, std::vector<uint32_t>(words, words + n));
  cache_[s] = lru_.begin();
  return Status::Ok();
}

int32_t Grammar::Advance(int32_t s, int32_t t) {
  const std::string* b = trie_->bytes(t);
  if (!b || b->empty()) return kDead;
  std::lock_guard<std::mutex> lock(mu_);
  return pda_ ? pda_->Run(s, *b) : dfa_->Run(s, *b);
}

bool Grammar::Accepting(int32_t s) {
  std::lock_guard<std::mutex> lock(mu_);
  return pda_ ? pda_->Accepting(s) : dfa_->Accepting(s);
}

bool Grammar::Finished(int32_t s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pda_) return pda_->Accepting(s) && !pda_->HasNext(s);
  return dfa_->Accepting(s) && !dfa_->HasNext(s);
}

bool Grammar::Matches(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return pda_ ? pda_->Matches(bytes) : dfa_->Matches(bytes);
}

int32_t Grammar::Run(int32_t s, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return pda_ ? pda_->Run(s, bytes) : dfa_->Run(s, bytes);
}

size_t Grammar::num_states() {
  std::lock_guard<std::mutex> lock(mu_);
  return pda_ ? pda_->num_states() : dfa_->num_states();
}

bool Grammar::Worn(size_t threshold) {
  std::lock_guard<std::mutex> lock(mu_);
  return pda_ && (pda_->overflowed() || pda_->num_states() > threshold);
}

}  // namespace sluice::structured
