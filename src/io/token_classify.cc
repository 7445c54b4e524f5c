#include "io/token_classify.h"

#include <algorithm>

namespace sluice::io {

bool ParseAggregation(std::string_view s, Aggregation* out) {
  if (s == "none")
    *out = Aggregation::kNone;
  else if (s == "simple")
    *out = Aggregation::kSimple;
  else if (s == "first")
    *out = Aggregation::kFirst;
  else if (s == "average")
    *out = Aggregation::kAverage;
  else if (s == "max")
    *out = Aggregation::kMax;
  else
    return false;
  return true;
}

namespace {

size_t Utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += Utf8Length(static_cast<unsigned char>(s[i]))) ++n;
  return n;
}

}  // namespace

CharOffsets::CharOffsets(std::string_view text) : text_(text), char_of_byte_(text.size()) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = std::min(Utf8Length(static_cast<unsigned char>(text[i])), text.size() - i);
    const int32_t c = static_cast<int32_t>(starts_.size());
    starts_.push_back(static_cast<int32_t>(i));
    for (size_t k = 0; k < len; ++k) char_of_byte_[i + k] = c;
    i += len;
  }
}

std::pair<int64_t, int64_t> CharOffsets::Convert(uint32_t start, uint32_t end) const {
  const size_t n = char_of_byte_.size();
  if (start >= n) return {start, end};
  const int64_t s = char_of_byte_[start];
  if (end < n) return {s, char_of_byte_[end]};
  const int64_t last = end >= 1 && end - 1 < n ? char_of_byte_[end - 1] : s;
  return {s, last + 1};
}

std::string_view CharOffsets::Slice(int64_t begin, int64_t end) const {
  const int64_t n = num_chars();
  begin = std::clamp<int64_t>(begin, 0, n);
  end = std::clamp<int64_t>(end, begin, n);
  const size_t b = begin < n ? static_cast<size_t>(starts_[begin]) : text_.size();
  const size_t e = end < n ? static_cast<size_t>(starts_[end]) : text_.size();
  return text_.substr(b, e - b);
}

namespace {

struct PreEntity {
  std::string word;
  const float* scores = nullptr;
  int64_t start = -1, end = -1;
  int index = 0;
  bool is_subword = false;
};

struct Labeled {
  std::string label;  // the full label (B-X, I-X, O, ...)
  float score = 0.f;
  int index = -1;
  std::string word;
  int64_t start = -1, end = -1;
};

size_t ArgMax(const float* v, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;  // the first of equal maxima, as numpy
  }
  return best;
}

// B-X -> (B, X); I-X -> (I, X); anything else -> (I, label), as the pipeline's get_tag.
std::pair<char, std::string> Tag(const std::string& label) {
  if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
  if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
  return {'I', label};
}

}  // namespace

StatusOr<std::vector<TokenEntity>> ClassifyTokens(const TokenClassifyParams& p,
                                                  std::string_view text, const Encoding& enc,
                                                  int sequence, const float* probs) {
  const Tokenizer& tok = *p.tokenizer;
  const std::vector<std::string>& labels = *p.labels;
  const size_t L = labels.size();
  const CharOffsets chars(text);
  const bool word_aware = !tok.ContinuingSubwordPrefix().empty();
  const std::optional<int32_t> unk = tok.UnkId();

  // gather_pre_entities
  std::vector<PreEntity> pre;
  for (size_t idx = 0; idx < enc.size(); ++idx) {
    if (enc.special_tokens_mask[idx] || enc.sequence_ids[idx] != sequence) continue;
    PreEntity e;
    e.word = enc.tokens[idx];
    std::tie(e.start, e.end) = chars.Convert(enc.offsets[idx].first, enc.offsets[idx].second);
    const std::string_view ref = chars.Slice(e.start, e.end);
    if (word_aware) {
      e.is_subword = CodePoints(e.word) != CodePoints(ref);
    } else {
      e.is_subword = e.start > 0 && chars.Char(e.start - 1) != " " && chars.Char(e.start) != " ";
    }
    if (unk && enc.ids[idx] == *unk) {
      e.word = std::string(ref);
      e.is_subword = false;
    }
    e.scores = probs + idx * L;
    e.index = static_cast<int>(idx);
    pre.push_back(std::move(e));
  }

  // aggregate: token entities (none/simple) or word entities (first/average/max)
  std::vector<Labeled> ents;
  if (p.aggregation == Aggregation::kNone || p.aggregation == Aggregation::kSimple) {
    for (const PreEntity& e : pre) {
      const size_t k = ArgMax(e.scores, L);
      ents.push_back({labels[k], e.scores[k], e.index, e.word, e.start, e.end});
    }
  } else {
    std::vector<float> avg(L);
    auto word_of = [&](size_t b, size_t n) -> Status {
      std::vector<std::string> words;
      for (size_t i = b; i < b + n; ++i) words.push_back(pre[i].word);
      ASSIGN_OR_RETURN(std::string word, tok.DecodeTokens(std::move(words)));
      const float* scores = pre[b].scores;
      size_t k = 0;
      float score = 0.f;
      if (p.aggregation == Aggregation::kFirst) {
        k = ArgMax(scores, L);
        score = scores[k];
      } else if (p.aggregation == Aggregation::kMax) {
        size_t best = b;
        float best_max = scores[ArgMax(scores, L)];
        for (size_t i = b + 1; i < b + n; ++i) {
          const float m = pre[i].scores[ArgMax(pre[i].scores, L)];
          if (m > best_max) {
            best_max = m;
            best = i;
          }
        }
        k = ArgMax(pre[best].scores, L);
        score = pre[best].scores[k];
      } else {
        for (size_t j = 0; j < L; ++j) {
          double s = 0;
          for (size_t i = b; i < b + n; ++i) s += pre[i].scores[j];
          avg[j] = static_cast<float>(s / static_cast<double>(n));
        }
        k = ArgMax(avg.data(), L);
        score = avg[k];
      }
      ents.push_back({labels[k], score, -1, std::move(word), pre[b].start, pre[b + n - 1].end});
      return Status::Ok();
    };
    size_t begin = 0;
    for (size_t i = 1; i <= pre.size(); ++i) {
      if (i < pre.size() && pre[i].is_subword) continue;
      if (!pre.empty()) RETURN_IF_ERROR(word_of(begin, i - begin));
      begin = i;
    }
  }

  auto ignored = [&](const std::string& label) {
    return std::find(p.ignore_labels.begin(), p.ignore_labels.end(), label) !=
           p.ignore_labels.end();
  };
  std::vector<TokenEntity> out;
  if (p.aggregation == Aggregation::kNone) {
    for (Labeled& e : ents) {
      if (ignored(e.label)) continue;
      out.push_back({std::move(e.label), e.score, e.index, std::move(e.word), e.start, e.end});
    }
    return out;
  }
  // group_entities: runs of the same tag that do not restart with B-.
  auto emit = [&](size_t b, size_t n) -> Status {
    const std::string& first = ents[b].label;
    const size_t dash = first.find('-');
    std::string group = dash == std::string::npos ? first : first.substr(dash + 1);
    double sum = 0;
    std::vector<std::string> words;
    for (size_t i = b; i < b + n; ++i) {
      sum += ents[i].score;
      words.push_back(ents[i].word);
    }
    if (ignored(group)) return Status::Ok();
    ASSIGN_OR_RETURN(std::string word, tok.DecodeTokens(std::move(words)));
    out.push_back({std::move(group), static_cast<float>(sum / static_cast<double>(n)), -1,
                   std::move(word), ents[b].start, ents[b + n - 1].end});
    return Status::Ok();
  };
  size_t begin = 0;
  for (size_t i = 1; i <= ents.size(); ++i) {
    if (i < ents.size()) {
      const auto [bi, tag] = Tag(ents[i].label);
      if (tag == Tag(ents[i - 1].label).second && bi != 'B') continue;
    }
    if (!ents.empty()) RETURN_IF_ERROR(emit(begin, i - begin));
    begin = i;
  }
  return out;
}

void WriteEntity(JsonWriter& w, const TokenEntity& e, Aggregation aggregation, int sequence) {
  w.BeginObject();
  const bool none = aggregation == Aggregation::kNone;
  w.KeyString(none ? "entity" : "entity_group", e.label);
  w.KeyFloat("score", e.score);
  if (none) w.KeyInt("index", e.index);
  w.KeyString("word", e.word);
  w.KeyInt("start", e.start);
  w.KeyInt("end", e.end);
  if (sequence >= 0) w.KeyInt("sequence", sequence);
  w.EndObject();
}

}  // namespace sluice::io
