// Added tokens: matched (leftmost-longest) before the model, as HF's AddedVocabulary.
#include <algorithm>

#include "tokenizer/internal.h"

namespace sluice::tok {

void AddedVocabulary::Build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  by_content_.clear();
  by_id_.clear();
  plain_ = MatchSet();
  normalized_ = MatchSet();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_content_[tokens_[i].content] = i;
    by_id_[tokens_[i].id] = i;
  }
  // HF order: special tokens first, then the others.
  std::vector<size_t> order;
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (tokens_[i].special) order.push_back(i);
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!tokens_[i].special) order.push_back(i);
  for (size_t i : order) {
    const AddedToken& t = tokens_[i];
    MatchSet& set = t.normalized ? normalized_ : plain_;
    std::string pat = t.content;
    if (t.normalized && normalizer) {
      NormalizedString ns = NormalizedString::FromOriginal(pat);
      if (normalizer->Normalize(&ns).ok()) pat = ns.norm;
    }
    if (pat.empty()) continue;
    set.patterns.push_back(pat);
    set.token_index.push_back(i);
  }
  for (MatchSet* set : {&plain_, &normalized_}) {
    for (size_t k = 0; k < set->patterns.size(); ++k)
      set->by_first[static_cast<unsigned char>(set->patterns[k][0])].push_back(k);
    for (auto& [c, v] : set->by_first) {
      std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) {
        return set->patterns[a].size() > set->patterns[b].size();
      });
    }
  }
}

std::optional<int32_t> AddedVocabulary::TokenToId(std::string_view t) const {
  auto it = by_content_.find(std::string(t));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const AddedToken* AddedVocabulary::ById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::IsSpecial(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it != by_content_.end() && tokens_[it->second].special;
}

namespace {
char32_t LastChar(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  size_t len;
  return DecodeAt(s, i, &len);
}
}  // namespace

std::vector<std::pair<size_t, Offsets>> AddedVocabulary::FindMatches(std::string_view s,
                                                                     const MatchSet& set) const {
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<std::pair<size_t, Offsets>> out;
  if (s.empty()) {
    out.push_back({kNone, {0, 0}});
    return out;
  }
  size_t start_offset = 0;
  if (!set.patterns.empty()) {
    for (size_t pos = 0; pos < s.size();) {
      auto it = set.by_first.find(static_cast<unsigned char>(s[pos]));
      size_t found = kNone;
      if (it != set.by_first.end()) {
        for (size_t k : it->second) {
          const std::string& p = set.patterns[k];
          if (s.compare(pos, p.size(), p) == 0) {
            found = k;
            break;
          }
        }
      }
      if (found == kNone) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + set.patterns[found].size();
      pos = stop;
      const AddedToken& t = tokens_[set.token_index[found]];
      if (t.single_word) {
        bool start_space = start == 0 || !IsWordChar(LastChar(s.substr(0, start)));
        size_t l;
        bool stop_space = stop == s.size() || !IsWordChar(DecodeAt(s, stop, &l));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t left = start;
        while (left > 0) {
          size_t k = left - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          size_t l;
          if (!IsWhitespace(DecodeAt(s, k, &l))) break;
          left = k;
        }
        start = std::max(left, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          size_t l;
          if (!IsWhitespace(DecodeAt(s, stop, &l))) break;
          stop += l;
        }
        pos = std::max(pos, stop);
      }
      if (start > start_offset) out.push_back({kNone, {uint32_t(start_offset), uint32_t(start)}});
      out.push_back({set.token_index[found], {uint32_t(start), uint32_t(stop)}});
      start_offset = stop;
    }
  }
  if (start_offset != s.size())
    out.push_back({kNone, {uint32_t(start_offset), uint32_t(s.size())}});
  return out;
}

void AddedVocabulary::SplitWith(NormalizedString ns, const MatchSet& set,
                                std::vector<Split>* out) const {
  if (set.patterns.empty()) {
    if (!ns.empty()) out->push_back(Split{std::move(ns), std::nullopt});
    return;
  }
  for (const auto& [idx, o] : FindMatches(ns.norm, set)) {
    if (o.first >= o.second) continue;
    NormalizedString piece = ns.Slice(o.first, o.second);
    if (idx == static_cast<size_t>(-1)) {
      out->push_back(Split{std::move(piece), std::nullopt});
    } else {
      std::vector<Token> t{
          Token{tokens_[idx].id, piece.norm, {0, static_cast<uint32_t>(piece.norm.size())}}};
      out->push_back(Split{std::move(piece), std::move(t)});
    }
  }
}

Status AddedVocabulary::ExtractAndNormalize(std::string_view text, const Normalizer* normalizer,
                                            std::vector<Split>* out) const {
  std::vector<Split> first;
  SplitWith(NormalizedString::FromOriginal(text), plain_, &first);
  out->clear();
  for (auto& s : first) {
    if (s.tokens) {
      out->push_back(std::move(s));
      continue;
    }
    if (normalizer) RETURN_IF_ERROR(normalizer->Normalize(&s.ns));
    SplitWith(std::move(s.ns), normalized_, out);
  }
  return Status::Ok();
}

}  // namespace sluice::tok
