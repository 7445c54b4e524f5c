// Post-processors: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence.
#include "tokenizer/internal.h"

namespace sluice::tok {

void EncodingFromSplits(const std::vector<Split>& splits, int32_t type_id, int8_t seq_id,
                        Encoding* enc) {
  int32_t word = -1;
  for (const auto& s : splits) {
    ++word;
    if (!s.tokens) continue;
    for (const auto& t : *s.tokens) {
      enc->word_ids.push_back(word);
      auto o = s.ns.ConvertOffsets(t.offsets.first, t.offsets.second);
      enc->ids.push_back(t.id);
      enc->type_ids.push_back(type_id);
      enc->tokens.push_back(t.value);
      enc->offsets.push_back(o ? *o : t.offsets);
      enc->special_tokens_mask.push_back(0);
      enc->sequence_ids.push_back(seq_id);
    }
  }
}

void MergeEncodings(std::vector<Encoding>* encs, Encoding* out) {
  *out = Encoding();
  for (auto& e : *encs) {
    out->ids.insert(out->ids.end(), e.ids.begin(), e.ids.end());
    out->type_ids.insert(out->type_ids.end(), e.type_ids.begin(), e.type_ids.end());
    for (auto& t : e.tokens) out->tokens.push_back(std::move(t));
    out->offsets.insert(out->offsets.end(), e.offsets.begin(), e.offsets.end());
    out->special_tokens_mask.insert(out->special_tokens_mask.end(), e.special_tokens_mask.begin(),
                                    e.special_tokens_mask.end());
    out->sequence_ids.insert(out->sequence_ids.end(), e.sequence_ids.begin(), e.sequence_ids.end());
    out->word_ids.insert(out->word_ids.end(), e.word_ids.begin(), e.word_ids.end());
  }
}

void TrimByteLevelOffsets(Encoding* enc, bool add_prefix_space) {
  constexpr char32_t kSpace = 0x120;  // byte-level 'Ġ'
  for (size_t i = 0; i < enc->size(); ++i) {
    auto cps = ToCodePoints(enc->tokens[i]);
    auto is_sp = [&](char32_t c) { return c == kSpace || IsWhitespace(c); };
    size_t leading = 0, trailing = 0;
    while (leading < cps.size() && is_sp(cps[leading])) ++leading;
    while (trailing < cps.size() && is_sp(cps[cps.size() - 1 - trailing])) ++trailing;
    auto& o = enc->offsets[i];
    if (leading > 0) {
      bool is_first = i == 0 || o.first == 0;
      if (is_first && add_prefix_space && leading == 1) leading = 0;
      o.first = std::min<uint32_t>(o.first + static_cast<uint32_t>(leading), o.second);
    }
    if (trailing > 0 && o.second >= trailing) {
      o.second = std::max<uint32_t>(o.second - static_cast<uint32_t>(trailing), o.first);
    }
  }
}

namespace {

void AddSpecial(Encoding* e, int32_t id, const std::string& token, int32_t type_id) {
  e->ids.push_back(id);
  e->type_ids.push_back(type_id);
  e->tokens.push_back(token);
  e->offsets.emplace_back(0, 0);
  e->special_tokens_mask.push_back(1);
  e->sequence_ids.push_back(-1);
  e->word_ids.push_back(-1);
}

void Append(Encoding* dst, const Encoding& src, std::optional<int32_t> type_id) {
  dst->ids.insert(dst->ids.end(), src.ids.begin(), src.ids.end());
  if (type_id) {
    dst->type_ids.insert(dst->type_ids.end(), src.ids.size(), *type_id);
  } else {
    dst->type_ids.insert(dst->type_ids.end(), src.type_ids.begin(), src.type_ids.end());
  }
  dst->tokens.insert(dst->tokens.end(), src.tokens.begin(), src.tokens.end());
  dst->offsets.insert(dst->offsets.end(), src.offsets.begin(), src.offsets.end());
  dst->special_tokens_mask.insert(dst->special_tokens_mask.end(), src.special_tokens_mask.begin(),
                                  src.special_tokens_mask.end());
  dst->sequence_ids.insert(dst->sequence_ids.end(), src.sequence_ids.begin(),
                           src.sequence_ids.end());
  dst->word_ids.insert(dst->word_ids.end(), src.word_ids.begin(), src.word_ids.end());
}

class TemplateProcessing : public PostProcessor {
 public:
  struct Piece {
    bool is_seq;
    int which;  // 0 = A, 1 = B for sequences
    std::string special;
    int32_t type_id;
  };
  struct Special {
    std::vector<int32_t> ids;
    std::vector<std::string> tokens;
  };
  std::vector<Piece> single, pair;
  std::unordered_map<std::string, Special> specials;

  size_t Count(const std::vector<Piece>& t) const {
    size_t n = 0;
    for (const auto& p : t) {
      if (p.is_seq) continue;
      auto it = specials.find(p.special);
      if (it != specials.end()) n += it->second.ids.size();
    }
    return n;
  }
  size_t AddedTokens(bool is_pair) const override { return Count(is_pair ? pair : single); }
  Status Process(std::vector<Encoding>* encs, bool add_special_tokens) const override {
    const auto& t = encs->size() == 2 ? pair : single;
    Encoding out;
    for (const auto& p : t) {
      if (p.is_seq) {
        size_t i = static_cast<size_t>(p.which);
        if (i >= encs->size()) return InvalidArgument("template refers to a missing sequence");
        Append(&out, (*encs)[i], p.type_id);
      } else if (add_special_tokens) {
        auto it = specials.find(p.special);
        if (it == specials.end())
          return InvalidArgument("template special token missing: " + p.special);
        for (size_t k = 0; k < it->second.ids.size(); ++k)
          AddSpecial(&out, it->second.ids[k], it->second.tokens[k], p.type_id);
      }
    }
    encs->clear();
    encs->push_back(std::move(out));
    return Status::Ok();
  }
};

class BertProcessing : public PostProcessor {
 public:
  BertProcessing(std::pair<std::string, int32_t> sep, std::pair<std::string, int32_t> cls,
                 bool roberta, bool trim, bool prefix)
      : sep_(std::move(sep)),
        cls_(std::move(cls)),
        roberta_(roberta),
        trim_(trim),
        prefix_(prefix) {}
  size_t AddedTokens(bool is_pair) const override {
    return roberta_ ? (is_pair ? 4 : 2) : (is_pair ? 3 : 2);
  }
  Status Process(std::vector<Encoding>* encs, bool add_special_tokens) const override {
    if (roberta_ && trim_) {
      for (auto& e : *encs) TrimByteLevelOffsets(&e, prefix_);
    }
    if (!add_special_tokens) return Status::Ok();
    for (size_t i = 0; i < encs->size(); ++i) {
      Encoding& src = (*encs)[i];
      Encoding e;
      if (i == 0) {
        AddSpecial(&e, cls_.second, cls_.first, 0);
        Append(&e, src, roberta_ ? std::optional<int32_t>(0) : std::nullopt);
        AddSpecial(&e, sep_.second, sep_.first, 0);
      } else {
        if (roberta_) AddSpecial(&e, sep_.second, sep_.first, 0);
        Append(&e, src, roberta_ ? std::optional<int32_t>(0) : std::nullopt);
        AddSpecial(&e, sep_.second, sep_.first, roberta_ ? 0 : 1);
      }
      src = std::move(e);
    }
    return Status::Ok();
  }

 private:
  std::pair<std::string, int32_t> sep_, cls_;
  bool roberta_, trim_, prefix_;
};

class ByteLevelProcessing : public PostProcessor {
 public:
  ByteLevelProcessing(bool trim, bool prefix) : trim_(trim), prefix_(prefix) {}
  size_t AddedTokens(bool) const override { return 0; }
  Status Process(std::vector<Encoding>* encs, bool) const override {
    if (trim_) {
      for (auto& e : *encs) TrimByteLevelOffsets(&e, prefix_);
    }
    return Status::Ok();
  }

 private:
  bool trim_, prefix_;
};

class SequenceProcessing : public PostProcessor {
 public:
  explicit SequenceProcessing(std::vector<std::unique_ptr<PostProcessor>> p) : p_(std::move(p)) {}
  size_t AddedTokens(bool is_pair) const override {
    size_t n = 0;
    for (const auto& p : p_) n += p->AddedTokens(is_pair);
    return n;
  }
  Status Process(std::vector<Encoding>* encs, bool add_special_tokens) const override {
    for (const auto& p : p_) RETURN_IF_ERROR(p->Process(encs, add_special_tokens));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> p_;
};

StatusOr<std::pair<std::string, int32_t>> TokenPair(JsonValue j, const char* key) {
  simdjson::dom::array a;
  if (j[key].get(a) != simdjson::SUCCESS || a.size() != 2)
    return InvalidArgument(std::string("bad ") + key);
  std::string_view s;
  int64_t id;
  if (a.at(0).get(s) != simdjson::SUCCESS || a.at(1).get(id) != simdjson::SUCCESS)
    return InvalidArgument(std::string("bad ") + key);
  return std::make_pair(std::string(s), static_cast<int32_t>(id));
}

StatusOr<std::vector<TemplateProcessing::Piece>> ParseTemplate(JsonValue j) {
  std::vector<TemplateProcessing::Piece> out;
  simdjson::dom::array arr;
  if (j.get(arr) != simdjson::SUCCESS) return InvalidArgument("template is not an array");
  for (auto e : arr) {
    TemplateProcessing::Piece p{};
    JsonValue v;
    if (e["Sequence"].get(v) == simdjson::SUCCESS) {
      p.is_seq = true;
      p.which = JStr(v, "id").value_or("A") == "B" ? 1 : 0;
    } else if (e["SpecialToken"].get(v) == simdjson::SUCCESS) {
      p.is_seq = false;
      p.special = std::string(JStr(v, "id").value_or(""));
    } else {
      return InvalidArgument("bad template piece");
    }
    p.type_id = static_cast<int32_t>(JInt(v, "type_id").value_or(0));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::unique_ptr<PostProcessor> MakeBertTemplate(int32_t cls, int32_t sep) {
  auto t = std::make_unique<TemplateProcessing>();
  using P = TemplateProcessing::Piece;
  t->single = {P{false, 0, "[CLS]", 0}, P{true, 0, "", 0}, P{false, 0, "[SEP]", 0}};
  t->pair = {P{false, 0, "[CLS]", 0}, P{true, 0, "", 0}, P{false, 0, "[SEP]", 0}, P{true, 1, "", 1},
             P{false, 0, "[SEP]", 1}};
  t->specials["[CLS]"] = {{cls}, {"[CLS]"}};
  t->specials["[SEP]"] = {{sep}, {"[SEP]"}};
  return t;
}

StatusOr<std::unique_ptr<PostProcessor>> MakePostProcessor(
    JsonValue j, const std::unordered_map<std::string, int32_t>& token_ids) {
  (void)token_ids;
  std::string type = JType(j);
  if (type == "TemplateProcessing") {
    auto t = std::make_unique<TemplateProcessing>();
    ASSIGN_OR_RETURN(t->single, ParseTemplate(j["single"]));
    ASSIGN_OR_RETURN(t->pair, ParseTemplate(j["pair"]));
    simdjson::dom::object sp;
    if (j["special_tokens"].get(sp) == simdjson::SUCCESS) {
      for (auto [k, v] : sp) {
        TemplateProcessing::Special s;
        simdjson::dom::array ids, toks;
        if (v["ids"].get(ids) == simdjson::SUCCESS) {
          for (auto x : ids) s.ids.push_back(static_cast<int32_t>(x.get_int64().value()));
        }
        if (v["tokens"].get(toks) == simdjson::SUCCESS) {
          for (auto x : toks) s.tokens.emplace_back(x.get_string().value());
        }
        if (s.ids.size() != s.tokens.size())
          return InvalidArgument("template special token: ids/tokens differ");
        t->specials[std::string(k)] = std::move(s);
      }
    }
    return std::unique_ptr<PostProcessor>(std::move(t));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    ASSIGN_OR_RETURN(auto sep, TokenPair(j, "sep"));
    ASSIGN_OR_RETURN(auto cls, TokenPair(j, "cls"));
    bool roberta = type == "RobertaProcessing";
    return std::unique_ptr<PostProcessor>(
        new BertProcessing(sep, cls, roberta, JBool(j, "trim_offsets").value_or(true),
                           JBool(j, "add_prefix_space").value_or(true)));
  }
  if (type == "ByteLevel") {
    return std::unique_ptr<PostProcessor>(new ByteLevelProcessing(
        JBool(j, "trim_offsets").value_or(true), JBool(j, "add_prefix_space").value_or(true)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> v;
    simdjson::dom::array arr;
    if (j["processors"].get(arr) != simdjson::SUCCESS)
      return InvalidArgument("Sequence without processors");
    for (auto e : arr) {
      ASSIGN_OR_RETURN(auto p, MakePostProcessor(e, token_ids));
      v.push_back(std::move(p));
    }
    return std::unique_ptr<PostProcessor>(new SequenceProcessing(std::move(v)));
  }
  return Unsupported("post-processor type '" + type + "'");
}

}  // namespace sluice::tok
