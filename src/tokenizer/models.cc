// Models: WordPiece, BPE (byte_fallback, ignore_merges, fuse_unk, affixes), Unigram
// (Viterbi), WordLevel.
#include <atomic>
#include <cstdio>
#include <queue>

#include "tokenizer/internal.h"

namespace sluice::tok {
namespace {

using Vocab = std::unordered_map<std::string, int32_t>;

// Heterogeneous lookup (find by string_view without allocating).
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using IdMap = std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>>;

std::vector<std::string> Reverse(const Vocab& v) {
  int32_t max_id = -1;
  for (const auto& [k, id] : v) max_id = std::max(max_id, id);
  std::vector<std::string> r(static_cast<size_t>(max_id + 1));
  for (const auto& [k, id] : v) {
    if (id >= 0) r[id] = k;
  }
  return r;
}

class VocabModel : public Model {
 public:
  explicit VocabModel(const Vocab& v) : vocab_(v.begin(), v.end()), rev_(Reverse(v)) {}
  std::optional<int32_t> TokenToId(std::string_view t) const override {
    auto it = vocab_.find(t);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> IdToToken(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= rev_.size()) return std::nullopt;
    return rev_[id];
  }
  size_t VocabSize() const override { return rev_.size(); }

 protected:
  const int32_t* Find(std::string_view s) const {
    auto it = vocab_.find(s);
    return it == vocab_.end() ? nullptr : &it->second;
  }
  IdMap vocab_;
  std::vector<std::string> rev_;
};

class WordPiece : public VocabModel {
 public:
  WordPiece(Vocab v, std::string unk, std::string prefix, size_t max_chars)
      : VocabModel(std::move(v)),
        unk_(std::move(unk)),
        prefix_(std::move(prefix)),
        max_chars_(max_chars) {}
  std::string ContinuingSubwordPrefix() const override { return prefix_; }
  Status Tokenize(std::string_view s, std::vector<Token>* out) const override {
    size_t chars = 0;
    for (size_t i = 0; i < s.size(); ++i)
      chars += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    auto unk = [&]() -> Status {
      const int32_t* id = Find(unk_);
      if (!id) return FailedPrecondition("WordPiece: unk token '" + unk_ + "' not in vocab");
      out->push_back(Token{*id, unk_, {0, static_cast<uint32_t>(s.size())}});
      return Status::Ok();
    };
    if (chars > max_chars_) return unk();
    size_t start = 0, first_out = out->size();
    std::string sub;
    while (start < s.size()) {
      size_t end = s.size();
      const int32_t* found = nullptr;
      while (start < end) {
        std::string_view piece;
        if (start > 0) {
          sub.assign(prefix_);
          sub.append(s.substr(start, end - start));
          piece = sub;
        } else {
          piece = s.substr(0, end);
        }
        if ((found = Find(piece))) {
          if (start == 0) sub.assign(piece);
          break;
        }
        // Drop the last char.
        size_t k = end - 1;
        while (k > start && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        end = k;
      }
      if (!found) {
        out->resize(first_out);
        return unk();
      }
      out->push_back(
          Token{*found, sub, {static_cast<uint32_t>(start), static_cast<uint32_t>(end)}});
      start = end;
    }
    return Status::Ok();
  }

 private:
  std::string unk_, prefix_;
  size_t max_chars_;
};

class WordLevel : public VocabModel {
 public:
  WordLevel(Vocab v, std::string unk) : VocabModel(std::move(v)), unk_(std::move(unk)) {}
  Status Tokenize(std::string_view s, std::vector<Token>* out) const override {
    std::string k(s);
    const int32_t* id = Find(k);
    if (!id) {
      id = Find(unk_);
      if (!id) return FailedPrecondition("WordLevel: unk token missing");
      k = unk_;
    }
    out->push_back(Token{*id, k, {0, static_cast<uint32_t>(s.size())}});
    return Status::Ok();
  }

 private:
  std::string unk_;
};

class Bpe : public VocabModel {
 public:
  struct Options {
    std::optional<std::string> unk, prefix, suffix;
    bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  };
  Bpe(Vocab v, Options o) : VocabModel(std::move(v)), o_(std::move(o)), cache_id_(NextCacheId()) {}
  std::string ContinuingSubwordPrefix() const override { return o_.prefix.value_or(""); }

  Status AddMerge(std::string_view a, std::string_view b, int32_t rank) {
    const int32_t* ia = Find(a);
    const int32_t* ib = Find(b);
    size_t plen = o_.prefix ? std::min(o_.prefix->size(), b.size()) : 0;
    std::string ab = std::string(a) + std::string(b.substr(plen));
    const int32_t* iab = Find(ab);
    if (!ia || !ib || !iab)
      return InvalidArgument("BPE merge '" + std::string(a) + " " + std::string(b) +
                             "' not in vocab");
    merges_.insert_or_assign(Key(*ia, *ib), std::make_pair(rank, *iab));
    return Status::Ok();
  }

  Status Tokenize(std::string_view s, std::vector<Token>* out) const override {
    if (s.empty()) return Status::Ok();
    // Per-thread word cache (HF caches words too); keyed by a unique id, never a pointer.
    thread_local std::unordered_map<uint64_t, std::unordered_map<std::string, std::vector<Token>>>
        caches;
    constexpr size_t kMaxCachedWord = 64, kMaxEntries = 20000;
    std::unordered_map<std::string, std::vector<Token>>* cache = nullptr;
    if (s.size() <= kMaxCachedWord) {
      cache = &caches[cache_id_];
      auto it = cache->find(std::string(s));
      if (it != cache->end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        return Status::Ok();
      }
    }
    size_t first = out->size();
    RETURN_IF_ERROR(TokenizeUncached(s, out));
    if (cache) {
      if (cache->size() >= kMaxEntries) cache->clear();
      cache->emplace(std::string(s), std::vector<Token>(out->begin() + first, out->end()));
    }
    return Status::Ok();
  }

  Status TokenizeUncached(std::string_view s, std::vector<Token>* out) const {
    if (o_.ignore_merges) {
      if (const int32_t* id = Find(s)) {
        out->push_back(Token{*id, std::string(s), {0, static_cast<uint32_t>(s.size())}});
        return Status::Ok();
      }
    }
    std::vector<Symbol> sym;
    sym.reserve(s.size());
    auto add = [&](int32_t id, uint32_t len) {
      int32_t n = static_cast<int32_t>(sym.size());
      if (!sym.empty()) sym.back().next = n;
      sym.push_back(Symbol{id, n - 1, -1, len});
    };
    bool have_unk = false;
    int32_t unk_id = 0;
    uint32_t unk_len = 0;
    std::string piece;
    for (size_t i = 0; i < s.size();) {
      size_t len;
      DecodeAt(s, i, &len);
      bool is_first = i == 0, is_last = i + len >= s.size();
      piece.clear();
      if (!is_first && o_.prefix) piece = *o_.prefix;
      piece.append(s.substr(i, len));
      if (is_last && o_.suffix) piece += *o_.suffix;
      i += len;
      if (const int32_t* id = Find(piece)) {
        if (have_unk) {
          add(unk_id, unk_len);
          have_unk = false;
        }
        add(*id, static_cast<uint32_t>(len));
        continue;
      }
      if (o_.byte_fallback) {
        std::vector<int32_t> ids;
        for (unsigned char b : piece) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
          const int32_t* id = Find(buf);
          if (!id) break;
          ids.push_back(*id);
        }
        if (ids.size() == piece.size()) {
          for (int32_t id : ids) add(id, 1);
          continue;
        }
      }
      if (o_.unk) {
        const int32_t* uid = Find(*o_.unk);
        if (!uid) return FailedPrecondition("BPE: unk token '" + *o_.unk + "' not in vocab");
        if (have_unk && o_.fuse_unk) {
          unk_len += static_cast<uint32_t>(len);
        } else {
          if (have_unk) add(unk_id, unk_len);
          have_unk = true;
          unk_id = *uid;
          unk_len = static_cast<uint32_t>(len);
        }
      }
    }
    if (have_unk) add(unk_id, unk_len);
    MergeAll(&sym);
    uint32_t pos = 0;
    for (const auto& x : sym) {
      if (x.len == 0) continue;
      out->push_back(Token{x.c, rev_[x.c], {pos, pos + x.len}});
      pos += x.len;
    }
    return Status::Ok();
  }

 private:
  struct Symbol {
    int32_t c, prev, next;
    uint32_t len;
  };
  struct Merge {
    size_t pos;
    int32_t rank, new_id;
  };
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const std::pair<int32_t, int32_t>* GetMerge(int32_t a, int32_t b) const {
    auto it = merges_.find(Key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void MergeAll(std::vector<Symbol>* symp) const {
    auto& sym = *symp;
    auto cmp = [](const Merge& a, const Merge& b) {
      if (a.rank != b.rank) return a.rank > b.rank;
      return a.pos > b.pos;
    };
    std::priority_queue<Merge, std::vector<Merge>, decltype(cmp)> q(cmp);
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      if (auto m = GetMerge(sym[i].c, sym[i + 1].c)) q.push(Merge{i, m->first, m->second});
    }
    while (!q.empty()) {
      Merge top = q.top();
      q.pop();
      Symbol& cur = sym[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      size_t next_pos = static_cast<size_t>(cur.next);
      Symbol right = sym[next_pos];
      auto m = GetMerge(cur.c, right.c);
      if (!m || m->second != top.new_id) continue;
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      sym[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < sym.size()) {
        sym[right.next].prev = static_cast<int32_t>(top.pos);
      }
      if (cur.prev >= 0) {
        if (auto pm = GetMerge(sym[cur.prev].c, cur.c))
          q.push(Merge{static_cast<size_t>(cur.prev), pm->first, pm->second});
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < sym.size()) {
        if (auto nm = GetMerge(cur.c, sym[cur.next].c))
          q.push(Merge{top.pos, nm->first, nm->second});
      }
    }
  }
  static uint64_t NextCacheId() {
    static std::atomic<uint64_t> next{1};
    return next++;
  }
  Options o_;
  uint64_t cache_id_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
};

class Unigram : public Model {
 public:
  Unigram(std::vector<std::pair<std::string, double>> vocab, std::optional<int32_t> unk_id,
          bool byte_fallback)
      : vocab_(std::move(vocab)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
    min_score_ = vocab_.empty() ? 0.0 : vocab_[0].second;
    for (size_t i = 0; i < vocab_.size(); ++i) {
      const std::string& p = vocab_[i].first;
      ids_[p] = static_cast<int32_t>(i);
      max_len_ = std::max(max_len_, p.size());
      min_score_ = std::min(min_score_, vocab_[i].second);
      for (size_t k = 1; k <= p.size(); ++k) prefixes_.emplace(p.substr(0, k), 0);
    }
  }
  std::optional<int32_t> TokenToId(std::string_view t) const override {
    auto it = ids_.find(t);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> IdToToken(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= vocab_.size()) return std::nullopt;
    return vocab_[id].first;
  }
  size_t VocabSize() const override { return vocab_.size(); }

  Status Tokenize(std::string_view s, std::vector<Token>* out) const override {
    if (s.empty()) return Status::Ok();
    struct Node {
      int32_t id = 0;
      double score = 0;
      int64_t starts_at = -1;
    };
    const double unk_score = min_score_ - 10.0;
    std::vector<Node> best(s.size() + 1);
    for (size_t start = 0; start < s.size();) {
      double base = best[start].score;
      size_t mblen;
      DecodeAt(s, start, &mblen);
      bool has_single = false;
      size_t limit = std::min(max_len_, s.size() - start);
      for (size_t len = 1; len <= limit; ++len) {
        std::string_view key = s.substr(start, len);
        if (prefixes_.find(key) == prefixes_.end()) break;  // as a trie walk would stop
        auto it = ids_.find(key);
        if (it == ids_.end()) continue;
        // HF's trie only holds complete pieces; a piece is found for each of its prefixes.
        Node& t = best[start + len];
        double cand = vocab_[it->second].second + base;
        if (t.starts_at < 0 || cand > t.score) {
          t.score = cand;
          t.starts_at = static_cast<int64_t>(start);
          t.id = it->second;
        }
        if (len == mblen) has_single = true;
      }
      if (!has_single) {
        if (!unk_id_) return FailedPrecondition("Unigram: no unk_id");
        Node& t = best[start + mblen];
        double cand = unk_score + base;
        if (t.starts_at < 0 || cand > t.score) {
          t.score = cand;
          t.starts_at = static_cast<int64_t>(start);
          t.id = *unk_id_;
        }
      }
      start += mblen;
    }
    // Backtrack, fusing consecutive unknowns.
    std::vector<std::pair<size_t, size_t>> pieces;  // byte ranges, reversed
    size_t end = s.size();
    constexpr size_t kNoUnk = static_cast<size_t>(-1);
    size_t unk_end = kNoUnk;
    while (end > 0) {
      const Node& n = best[end];
      size_t start = static_cast<size_t>(n.starts_at);
      if (unk_id_ && n.id == *unk_id_) {
        if (unk_end == kNoUnk) unk_end = end;
      } else {
        if (unk_end != kNoUnk) {
          pieces.emplace_back(end, unk_end);
          unk_end = kNoUnk;
        }
        pieces.emplace_back(start, end);
      }
      end = start;
    }
    if (unk_end != kNoUnk) pieces.emplace_back(0, unk_end);
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      std::string piece(s.substr(it->first, it->second - it->first));
      Offsets o{static_cast<uint32_t>(it->first), static_cast<uint32_t>(it->second)};
      auto f = ids_.find(piece);
      if (f != ids_.end()) {
        out->push_back(Token{f->second, piece, o});
        continue;
      }
      if (byte_fallback_) {
        std::vector<Token> bt;
        for (unsigned char b : piece) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
          auto g = ids_.find(buf);
          if (g == ids_.end()) break;
          bt.push_back(Token{g->second, buf, o});
        }
        if (bt.size() == piece.size()) {
          out->insert(out->end(), bt.begin(), bt.end());
          continue;
        }
      }
      if (!unk_id_) return FailedPrecondition("Unigram: no unk_id");
      out->push_back(Token{*unk_id_, piece, o});
    }
    return Status::Ok();
  }

 private:
  std::vector<std::pair<std::string, double>> vocab_;
  IdMap ids_;
  IdMap prefixes_;  // every prefix of every piece (the trie's nodes)
  std::optional<int32_t> unk_id_;
  bool byte_fallback_;
  double min_score_ = 0;
  size_t max_len_ = 0;
};

StatusOr<Vocab> ReadVocab(JsonValue j) {
  simdjson::dom::object obj;
  if (j["vocab"].get(obj) != simdjson::SUCCESS) return InvalidArgument("model.vocab missing");
  Vocab v;
  v.reserve(obj.size());
  for (auto [k, val] : obj) {
    int64_t id;
    if (val.get(id) != simdjson::SUCCESS) return InvalidArgument("vocab id not an integer");
    v.emplace(std::string(k), static_cast<int32_t>(id));
  }
  return v;
}

std::optional<std::string> OptStr(JsonValue j, const char* key) {
  if (auto s = JStr(j, key)) return std::string(*s);
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Model> MakeWordPiece(Vocab vocab, std::string unk, std::string prefix,
                                     size_t max_chars) {
  return std::make_unique<WordPiece>(std::move(vocab), std::move(unk), std::move(prefix),
                                     max_chars);
}

StatusOr<std::unique_ptr<Model>> MakeModel(JsonValue j) {
  std::string type = JType(j);
  if (type.empty()) {
    // Older files omit the type: infer it.
    if (j["merges"].error() == simdjson::SUCCESS)
      type = "BPE";
    else if (j["continuing_subword_prefix"].error() == simdjson::SUCCESS)
      type = "WordPiece";
    else if (j["vocab"].is_array())
      type = "Unigram";
    else
      type = "WordLevel";
  }
  if (type == "WordPiece") {
    ASSIGN_OR_RETURN(auto v, ReadVocab(j));
    return MakeWordPiece(std::move(v), OptStr(j, "unk_token").value_or("[UNK]"),
                         OptStr(j, "continuing_subword_prefix").value_or("##"),
                         static_cast<size_t>(JInt(j, "max_input_chars_per_word").value_or(100)));
  }
  if (type == "WordLevel") {
    ASSIGN_OR_RETURN(auto v, ReadVocab(j));
    return std::unique_ptr<Model>(
        new WordLevel(std::move(v), OptStr(j, "unk_token").value_or("<unk>")));
  }
  if (type == "BPE") {
    ASSIGN_OR_RETURN(auto v, ReadVocab(j));
    Bpe::Options o;
    o.unk = OptStr(j, "unk_token");
    o.prefix = OptStr(j, "continuing_subword_prefix");
    o.suffix = OptStr(j, "end_of_word_suffix");
    o.fuse_unk = JBool(j, "fuse_unk").value_or(false);
    o.byte_fallback = JBool(j, "byte_fallback").value_or(false);
    o.ignore_merges = JBool(j, "ignore_merges").value_or(false);
    auto bpe = std::make_unique<Bpe>(std::move(v), o);
    simdjson::dom::array merges;
    if (j["merges"].get(merges) == simdjson::SUCCESS) {
      int32_t rank = 0;
      for (auto m : merges) {
        std::string_view a, b;
        if (m.is_string()) {
          std::string_view line = m.get_string().value();
          size_t sp = line.find(' ');
          if (sp == std::string_view::npos)
            return InvalidArgument("bad merge '" + std::string(line) + "'");
          a = line.substr(0, sp);
          b = line.substr(sp + 1);
        } else {
          simdjson::dom::array pair;
          if (m.get(pair) != simdjson::SUCCESS || pair.size() != 2)
            return InvalidArgument("bad merge");
          a = pair.at(0).get_string().value();
          b = pair.at(1).get_string().value();
        }
        RETURN_IF_ERROR(bpe->AddMerge(a, b, rank++));
      }
    }
    return std::unique_ptr<Model>(std::move(bpe));
  }
  if (type == "Unigram") {
    simdjson::dom::array arr;
    if (j["vocab"].get(arr) != simdjson::SUCCESS) return InvalidArgument("Unigram vocab missing");
    std::vector<std::pair<std::string, double>> vocab;
    for (auto e : arr) {
      simdjson::dom::array p;
      if (e.get(p) != simdjson::SUCCESS || p.size() != 2)
        return InvalidArgument("bad Unigram piece");
      std::string_view piece = p.at(0).get_string().value();
      double score;
      if (p.at(1).get(score) != simdjson::SUCCESS) {
        int64_t iscore;
        if (p.at(1).get(iscore) != simdjson::SUCCESS) return InvalidArgument("bad Unigram score");
        score = static_cast<double>(iscore);
      }
      vocab.emplace_back(std::string(piece), score);
    }
    std::optional<int32_t> unk;
    if (auto u = JInt(j, "unk_id")) unk = static_cast<int32_t>(*u);
    return std::unique_ptr<Model>(
        new Unigram(std::move(vocab), unk, JBool(j, "byte_fallback").value_or(false)));
  }
  return Unsupported("model type '" + type + "'");
}

}  // namespace sluice::tok
