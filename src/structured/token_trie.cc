// The token trie of token_mask.h: built once per tokenizer (tokens sorted by bytes give its
// nodes in DFS order), with the per-byte-set loop covers and reaches the mask walks share.
#include <algorithm>
#include <array>
#include <map>

#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace sluice::structured {

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
  t->node_of_.assign(static_cast<size_t>(t->vocab_size_), 0);
  // Build with maps first (simple), then flatten.
  struct Node {
    std::map<uint8_t, uint32_t> kids;
    std::vector<int32_t> toks;
  };
  std::vector<Node> nodes(1);
  t->parent_.push_back(0);
  t->byte_.push_back(0);
  for (int32_t id : ids) {
    uint32_t cur = 0;
    for (char c : *t->tokens_[static_cast<size_t>(id)]) {
      const auto b = static_cast<uint8_t>(c);
      auto it = nodes[cur].kids.find(b);
      if (it == nodes[cur].kids.end()) {
        nodes.emplace_back();
        const auto n = static_cast<uint32_t>(nodes.size() - 1);
        nodes[cur].kids[b] = n;
        t->parent_.push_back(cur);
        t->byte_.push_back(b);
        cur = n;
      } else {
        cur = it->second;
      }
    }
    nodes[cur].toks.push_back(id);
    t->node_of_[static_cast<size_t>(id)] = cur;
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
  t->depth_.assign(nodes.size(), 0);
  for (size_t n = 1; n < nodes.size(); ++n) {
    t->depth_[n] = t->depth_[t->parent_[n]] + 1;
    t->max_depth_ = std::max(t->max_depth_, t->depth_[n]);
  }
  t->end_.resize(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) t->end_[n] = static_cast<uint32_t>(n + 1);
  for (size_t n = nodes.size() - 1; n > 0; --n) {
    uint32_t& e = t->end_[t->parent_[n]];
    e = std::max(e, t->end_[n]);
  }
  // Tokens by length, longest first (TokensLongerThan).
  t->by_length_ = ids;
  std::stable_sort(t->by_length_.begin(), t->by_length_.end(), [&](int32_t a, int32_t b) {
    return t->tokens_[static_cast<size_t>(a)]->size() > t->tokens_[static_cast<size_t>(b)]->size();
  });
  // The longest token of each subtree (children come after their parent).
  t->sub_depth_.assign(nodes.size(), 0);
  for (size_t n = nodes.size() - 1; n > 0; --n) {
    if (t->tok_begin_[n + 1] > t->tok_begin_[n]) {
      t->sub_depth_[n] = std::max(t->sub_depth_[n], t->depth_[n]);
    }
    uint32_t& p = t->sub_depth_[t->parent_[n]];
    p = std::max(p, t->sub_depth_[n]);
  }
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

// The per-byte-set results (covers, forests, reaches): found under the lock; computed outside
// it (a walk of the whole trie: other threads keep finding theirs), then kept unless another
// thread made it meanwhile; past kMaxLoopCovers the oldest goes (holders keep their copy).
template <typename T>
std::shared_ptr<const T> TokenTrie::Find(const PerSet<T>& list, const ByteSet& l) const {
  std::lock_guard<std::mutex> lock(cover_mu_);
  for (const auto& [set, v] : list) {
    if (set == l) return v;
  }
  return nullptr;
}

template <typename T>
std::shared_ptr<const T> TokenTrie::Keep(PerSet<T>& list, const ByteSet& l,
                                         std::shared_ptr<const T> v) const {
  std::lock_guard<std::mutex> lock(cover_mu_);
  for (const auto& [set, other] : list) {
    if (set == l) return other;
  }
  if (list.size() >= kMaxLoopCovers) list.erase(list.begin());
  list.emplace_back(l, v);
  return v;
}

std::shared_ptr<const TokenTrie::LoopCover> TokenTrie::Cover(const ByteSet& l) const {
  if (auto found = Find(covers_, l)) return found;
  auto c = std::make_shared<LoopCover>();
  c->mask.assign(static_cast<size_t>(words()), 0);
  std::vector<uint32_t> stack = {0};
  while (!stack.empty()) {
    const uint32_t n = stack.back();
    stack.pop_back();
    for (uint32_t e = child_begin_[n]; e < child_begin_[n + 1]; ++e) {
      const uint8_t b = edge_byte_[e];
      if (n != 0 && !((l[b >> 6] >> (b & 63)) & 1)) {
        c->exits.push_back(e);
        continue;
      }
      const uint32_t k = edge_child_[e];
      for (uint32_t i = tok_begin_[k]; i < tok_begin_[k + 1]; ++i) {
        const int32_t id = tok_ids_[i];
        c->mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      }
      if (child_begin_[k + 1] > child_begin_[k]) stack.push_back(k);
    }
  }
  return Keep(covers_, l, std::shared_ptr<const LoopCover>(c));
}

std::shared_ptr<const TokenTrie::ExitForest> TokenTrie::Exits(const ByteSet& l) const {
  if (auto found = Find(forests_, l)) return found;
  auto in_l = [&](uint8_t b) { return ((l[b >> 6] >> (b & 63)) & 1) != 0; };
  auto f = std::make_shared<ExitForest>();
  f->all_in.assign(static_cast<size_t>(words()), 0);
  // The nodes whose bytes are all in L (the root included): their tokens are all_in, their
  // edges of a byte not in L enter the exit byte's group.
  std::array<std::vector<uint32_t>, 256> entries;
  std::vector<uint32_t> stack = {0};
  while (!stack.empty()) {
    const uint32_t n = stack.back();
    stack.pop_back();
    for (uint32_t e = child_begin_[n]; e < child_begin_[n + 1]; ++e) {
      const uint8_t b = edge_byte_[e];
      const uint32_t k = edge_child_[e];
      if (!in_l(b)) {
        entries[b].push_back(k);
        continue;
      }
      for (uint32_t i = tok_begin_[k]; i < tok_begin_[k + 1]; ++i) {
        const int32_t id = tok_ids_[i];
        f->all_in[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      }
      if (child_begin_[k + 1] > child_begin_[k]) stack.push_back(k);
    }
  }
  // A forest node merges a set of trie nodes reached by the same bytes after the exit; its
  // children merge their children by byte. Built depth first, so subtrees are ranges.
  // Items to emit: trie nodes pool[begin, begin + count).
  struct Item {
    uint32_t begin, count, depth;
    uint8_t byte;
    uint32_t parent;  // forest index (kNone for a root)
  };
  constexpr uint32_t kNone = ~0u;
  std::vector<uint32_t> pool;
  std::vector<Item> todo;
  for (int b = 255; b >= 0; --b) {
    const std::vector<uint32_t>& en = entries[static_cast<size_t>(b)];
    if (en.empty()) continue;
    todo.push_back({static_cast<uint32_t>(pool.size()), static_cast<uint32_t>(en.size()), 0,
                    static_cast<uint8_t>(b), kNone});
    pool.insert(pool.end(), en.begin(), en.end());
  }
  std::vector<uint32_t> parent;
  std::vector<std::pair<uint8_t, uint32_t>> kids;
  while (!todo.empty()) {
    const Item it = todo.back();
    todo.pop_back();
    const auto r = static_cast<uint32_t>(f->depth.size());
    if (it.depth > 0 && it.count == 1) {
      // One trie node: nothing merges below it, so its subtree is walked in the trie itself.
      const uint32_t n = pool[it.begin];
      f->depth.push_back(it.depth);
      f->byte.push_back(it.byte);
      f->end.push_back(r + 1);
      f->below.push_back(child_begin_[n + 1] > child_begin_[n] ? n : ExitForest::kNoSubtree);
      parent.push_back(it.parent);
      f->trie_begin.push_back(static_cast<uint32_t>(f->trie.size()));
      f->tok_begin.push_back(static_cast<uint32_t>(f->toks.size()));
      f->trie.push_back(n);
      f->toks.insert(f->toks.end(), tok_ids_.begin() + tok_begin_[n],
                     tok_ids_.begin() + tok_begin_[n + 1]);
      continue;
    }
    if (it.depth == 0) f->roots.push_back(r);
    f->depth.push_back(it.depth);
    f->byte.push_back(it.byte);
    f->below.push_back(ExitForest::kNoSubtree);
    f->end.push_back(r + 1);
    parent.push_back(it.parent);
    f->trie_begin.push_back(static_cast<uint32_t>(f->trie.size()));
    f->tok_begin.push_back(static_cast<uint32_t>(f->toks.size()));
    kids.clear();
    for (uint32_t i = it.begin; i < it.begin + it.count; ++i) {
      const uint32_t n = pool[i];
      f->trie.push_back(n);
      f->toks.insert(f->toks.end(), tok_ids_.begin() + tok_begin_[n],
                     tok_ids_.begin() + tok_begin_[n + 1]);
      for (uint32_t e = child_begin_[n]; e < child_begin_[n + 1]; ++e) {
        kids.emplace_back(edge_byte_[e], edge_child_[e]);
      }
    }
    if (it.count > 1)
      std::stable_sort(kids.begin(), kids.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
    // Groups of one byte, pushed last byte first (the first byte is emitted next).
    for (size_t hi = kids.size(); hi > 0;) {
      size_t lo = hi - 1;
      while (lo > 0 && kids[lo - 1].first == kids[hi - 1].first) --lo;
      todo.push_back({static_cast<uint32_t>(pool.size()), static_cast<uint32_t>(hi - lo),
                      it.depth + 1, kids[lo].first, r});
      for (size_t k = lo; k < hi; ++k) pool.push_back(kids[k].second);
      hi = lo;
    }
  }
  f->trie_begin.push_back(static_cast<uint32_t>(f->trie.size()));
  f->tok_begin.push_back(static_cast<uint32_t>(f->toks.size()));
  for (size_t r = f->depth.size(); r-- > 0;) {  // children come after their parent
    if (parent[r] != kNone) f->end[parent[r]] = std::max(f->end[parent[r]], f->end[r]);
  }
  return Keep(forests_, l, std::shared_ptr<const ExitForest>(f));
}

bool TokenTrie::IsEos(int32_t id) const { return std::binary_search(eos_.begin(), eos_.end(), id); }

const std::string* TokenTrie::bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return nullptr;
  const auto& t = tokens_[static_cast<size_t>(id)];
  return t ? &*t : nullptr;
}

std::shared_ptr<const TokenTrie::Reach> TokenTrie::ReachWithin(const ByteSet& l) const {
  if (auto found = Find(reaches_, l)) return found;
  // in_l[n]: the length of the prefix of node n's bytes in l (nodes are in DFS order, so a
  // parent comes before its children).
  const size_t n_nodes = num_nodes();
  std::vector<uint32_t> in_l(n_nodes, 0);
  std::vector<size_t> count(max_depth_ + 2, 0);  // tokens by in_l
  for (size_t n = 1; n < n_nodes; ++n) {
    const uint32_t p = parent_[n];
    const uint8_t b = byte_[n];
    in_l[n] = (in_l[p] == depth_[p] && ((l[b >> 6] >> (b & 63)) & 1)) ? depth_[n] : in_l[p];
    count[in_l[n]] += tok_begin_[n + 1] - tok_begin_[n];
  }
  auto r = std::make_shared<Reach>();
  size_t above = 0;  // tokens with in_l > r->depth
  r->depth = max_depth_ + 1;
  while (r->depth > 0 && above + count[r->depth] <= kMaxReachExceptions) {
    above += count[r->depth];
    --r->depth;
  }
  for (size_t n = 1; n < n_nodes; ++n) {
    if (in_l[n] <= r->depth) continue;
    for (uint32_t k = tok_begin_[n]; k < tok_begin_[n + 1]; ++k) r->longer.push_back(tok_ids_[k]);
  }
  return Keep(reaches_, l, std::shared_ptr<const Reach>(r));
}

size_t TokenTrie::TokensLongerThan(size_t bytes) const {
  const auto it = std::partition_point(by_length_.begin(), by_length_.end(), [&](int32_t id) {
    return tokens_[static_cast<size_t>(id)]->size() > bytes;
  });
  return static_cast<size_t>(it - by_length_.begin());
}

}  // namespace sluice::structured
