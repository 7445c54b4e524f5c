// Tokenizer: loading (tokenizer.json, vocab.txt, tokenizer_config.json), encoding with
// truncation and post-processing, decoding and streaming decoding.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tokenizer/internal.h"

namespace sluice {
namespace tok {

class Pipeline {
 public:
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;

  Status EncodeOne(std::string_view text, int32_t type_id, int8_t seq, Encoding* out) const {
    std::vector<Split> splits;
    RETURN_IF_ERROR(added.ExtractAndNormalize(text, normalizer.get(), &splits));
    if (pre) RETURN_IF_ERROR(pre->PreTokenize(&splits));
    for (auto& s : splits) {
      if (s.tokens) continue;
      s.tokens.emplace();
      RETURN_IF_ERROR(model->Tokenize(s.ns.norm, &*s.tokens));
    }
    EncodingFromSplits(splits, type_id, seq, out);
    return Status::Ok();
  }
};

}  // namespace tok

using tok::JsonValue;

Tokenizer::Tokenizer() : p_(std::make_unique<tok::Pipeline>()) {}
Tokenizer::~Tokenizer() = default;

namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

void Truncate(Encoding* e, size_t n) {
  if (e->size() <= n) return;
  e->ids.resize(n);
  e->type_ids.resize(n);
  e->tokens.resize(n);
  e->offsets.resize(n);
  e->special_tokens_mask.resize(n);
  e->sequence_ids.resize(n);
  e->word_ids.resize(n);
}

// HF tokenizers stops tokenizing a text once it holds max_length tokens (keeping the word that
// crosses the limit), before truncate_encodings sees the lengths. Observable in longest_first's
// choice of the longer sequence, so it is reproduced here.
void CapAtWords(Encoding* e, size_t max_length) {
  size_t k = 0;
  while (k < e->size()) {
    if (k >= max_length && e->word_ids[k] != e->word_ids[k - 1]) break;
    ++k;
  }
  Truncate(e, k);
}

Status TruncateEncodings(Encoding* a, Encoding* b, size_t max_length, TruncationStrategy strategy) {
  if (max_length == 0) {
    Truncate(a, 0);
    if (b) Truncate(b, 0);
    return Status::Ok();
  }
  size_t total = a->size() + (b ? b->size() : 0);
  if (total <= max_length) return Status::Ok();
  size_t to_remove = total - max_length;
  if (strategy == TruncationStrategy::kLongestFirst) {
    if (!b) {
      Truncate(a, total - to_remove);
      return Status::Ok();
    }
    size_t n1 = a->size(), n2 = b->size();
    bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);  // n1: the shorter
    // Same arithmetic as HF tokenizers' truncate_encodings.
    n2 = n1 > max_length ? n1 : std::max(n1, max_length - n1);
    if (n1 + n2 > max_length) {
      n1 = max_length / 2;
      n2 = n1 + max_length % 2;
    }
    if (swap) std::swap(n1, n2);
    Truncate(a, n1);
    Truncate(b, n2);
    return Status::Ok();
  }
  Encoding* target = strategy == TruncationStrategy::kOnlyFirst ? a : b;
  if (!target) return InvalidArgument("truncation only_second needs a pair of texts");
  if (target->size() > to_remove) {
    Truncate(target, target->size() - to_remove);
    return Status::Ok();
  }
  return InvalidArgument("truncation: the sequence to truncate is too short to respect max_length");
}

void RemapOffsets(Encoding* e, size_t from, const std::vector<uint32_t>& map, int8_t seq) {
  for (size_t i = from; i < e->size(); ++i) {
    if (e->sequence_ids[i] != seq) continue;
    auto& o = e->offsets[i];
    o.first = map[std::min<size_t>(o.first, map.size() - 1)];
    o.second = map[std::min<size_t>(o.second, map.size() - 1)];
  }
}

std::optional<std::string> SpecialTokenString(JsonValue j, const char* key) {
  if (auto s = tok::JStr(j, key)) return std::string(*s);
  JsonValue v;
  if (j[key].get(v) == simdjson::SUCCESS) {
    if (auto c = tok::JStr(v, "content")) return std::string(*c);
  }
  return std::nullopt;
}

TokenizerConfig ParseConfig(JsonValue j) {
  TokenizerConfig c;
  if (auto v = tok::JInt(j, "model_max_length"); v && *v > 0)
    c.model_max_length = static_cast<size_t>(*v);
  double d;
  if (!c.model_max_length && j["model_max_length"].get(d) == simdjson::SUCCESS && d > 0 && d < 1e12)
    c.model_max_length = static_cast<size_t>(d);
  if (auto s = tok::JStr(j, "padding_side")) c.padding_side = std::string(*s);
  if (auto s = tok::JStr(j, "truncation_side")) c.truncation_side = std::string(*s);
  c.bos_token = SpecialTokenString(j, "bos_token");
  c.eos_token = SpecialTokenString(j, "eos_token");
  c.unk_token = SpecialTokenString(j, "unk_token");
  c.sep_token = SpecialTokenString(j, "sep_token");
  c.pad_token = SpecialTokenString(j, "pad_token");
  c.cls_token = SpecialTokenString(j, "cls_token");
  c.mask_token = SpecialTokenString(j, "mask_token");
  if (auto s = tok::JStr(j, "chat_template")) c.chat_template = std::string(*s);
  c.add_bos_token = tok::JBool(j, "add_bos_token");
  c.add_eos_token = tok::JBool(j, "add_eos_token");
  return c;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  if (auto err = parser.parse(padded).get(root)) {
    return InvalidArgument(std::string("tokenizer.json: ") + simdjson::error_message(err));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  tok::Pipeline& p = *t->p_;
  JsonValue v;
  if (root["normalizer"].get(v) == simdjson::SUCCESS && !v.is_null()) {
    ASSIGN_OR_RETURN(p.normalizer, tok::MakeNormalizer(v));
  }
  if (root["pre_tokenizer"].get(v) == simdjson::SUCCESS && !v.is_null()) {
    ASSIGN_OR_RETURN(p.pre, tok::MakePreTokenizer(v));
  }
  if (root["model"].get(v) != simdjson::SUCCESS) return InvalidArgument("tokenizer.json: no model");
  ASSIGN_OR_RETURN(p.model, tok::MakeModel(v));
  std::vector<tok::AddedToken> added;
  std::unordered_map<std::string, int32_t> added_ids;
  simdjson::dom::array arr;
  if (root["added_tokens"].get(arr) == simdjson::SUCCESS) {
    for (auto e : arr) {
      tok::AddedToken a;
      auto id = tok::JInt(e, "id");
      auto content = tok::JStr(e, "content");
      if (!id || !content) return InvalidArgument("tokenizer.json: bad added token");
      a.id = static_cast<int32_t>(*id);
      a.content = std::string(*content);
      a.single_word = tok::JBool(e, "single_word").value_or(false);
      a.lstrip = tok::JBool(e, "lstrip").value_or(false);
      a.rstrip = tok::JBool(e, "rstrip").value_or(false);
      a.special = tok::JBool(e, "special").value_or(false);
      a.normalized = tok::JBool(e, "normalized").value_or(!a.special);
      added_ids[a.content] = a.id;
      added.push_back(std::move(a));
    }
  }
  p.added.Build(std::move(added), p.normalizer.get());
  if (root["post_processor"].get(v) == simdjson::SUCCESS && !v.is_null()) {
    ASSIGN_OR_RETURN(p.post, tok::MakePostProcessor(v, added_ids));
  }
  if (root["decoder"].get(v) == simdjson::SUCCESS && !v.is_null()) {
    ASSIGN_OR_RETURN(p.decoder, tok::MakeDecoder(v));
  }
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromBertVocab(std::string_view vocab_txt,
                                                              bool lowercase,
                                                              std::optional<bool> strip_accents,
                                                              bool tokenize_chinese_chars) {
  std::unordered_map<std::string, int32_t> vocab;
  int32_t id = 0;
  size_t pos = 0;
  while (pos < vocab_txt.size()) {
    size_t nl = vocab_txt.find('\n', pos);
    if (nl == std::string_view::npos) nl = vocab_txt.size();
    std::string_view line = vocab_txt.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    vocab.emplace(std::string(line), id++);
    pos = nl + 1;
  }
  if (!vocab.count("[CLS]") || !vocab.count("[SEP]") || !vocab.count("[UNK]"))
    return FailedPrecondition("vocab.txt lacks [CLS], [SEP] or [UNK]");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  tok::Pipeline& p = *t->p_;
  p.normalizer = tok::MakeBertNormalizer(true, tokenize_chinese_chars, strip_accents, lowercase);
  p.pre = tok::MakeBertPreTokenizer();
  p.post = tok::MakeBertTemplate(vocab["[CLS]"], vocab["[SEP]"]);
  p.decoder = tok::MakeWordPieceDecoder("##", true);
  std::vector<tok::AddedToken> added;
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    auto it = vocab.find(s);
    if (it == vocab.end()) continue;
    added.push_back(tok::AddedToken{it->second, s, false, false, false, false, true});
  }
  p.model = tok::MakeWordPiece(std::move(vocab), "[UNK]", "##", 100);
  p.added.Build(std::move(added), p.normalizer.get());
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  TokenizerConfig cfg;
  simdjson::dom::parser parser;
  simdjson::dom::element cfg_json;
  bool have_cfg = false;
  std::string cfg_path = dir + "/tokenizer_config.json";
  if (FileExists(cfg_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(cfg_path));
    simdjson::padded_string padded(text);
    if (auto err = parser.parse(padded).get(cfg_json)) {
      return InvalidArgument(cfg_path + ": " + simdjson::error_message(err));
    }
    cfg = ParseConfig(cfg_json);
    have_cfg = true;
  }
  std::unique_ptr<Tokenizer> t;
  if (FileExists(dir + "/tokenizer.json")) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/tokenizer.json"));
    auto r = FromJson(text);
    if (!r.ok()) return r.status().WithContext(dir + "/tokenizer.json");
    t = std::move(r).value();
  } else if (FileExists(dir + "/vocab.txt")) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/vocab.txt"));
    bool lower = true, chinese = true;
    std::optional<bool> strip;
    if (have_cfg) {
      lower = tok::JBool(cfg_json, "do_lower_case").value_or(true);
      chinese = tok::JBool(cfg_json, "tokenize_chinese_chars").value_or(true);
      strip = tok::JBool(cfg_json, "strip_accents");
    }
    ASSIGN_OR_RETURN(t, FromBertVocab(text, lower, strip, chinese));
  } else {
    return NotFound(dir + ": no tokenizer.json or vocab.txt");
  }
  t->config_ = std::move(cfg);
  return t;
}

StatusOr<Encoding> Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                                     const TruncationParams* trunc) const {
  return EncodeImpl(text, std::string_view(), false, add_special_tokens, trunc);
}

StatusOr<Encoding> Tokenizer::EncodePair(std::string_view a, std::string_view b,
                                         bool add_special_tokens,
                                         const TruncationParams* trunc) const {
  return EncodeImpl(a, b, true, add_special_tokens, trunc);
}

StatusOr<Encoding> Tokenizer::EncodeImpl(std::string_view a, std::string_view b, bool is_pair,
                                         bool add_special_tokens,
                                         const TruncationParams* trunc) const {
  std::vector<Encoding> encs(is_pair ? 2 : 1);
  std::string_view texts[2] = {a, b};
  for (size_t i = 0; i < encs.size(); ++i) {
    if (IsValidUtf8If(texts[i])) {
      RETURN_IF_ERROR(p_->EncodeOne(texts[i], int32_t(i), int8_t(i), &encs[i]));
    } else {
      std::vector<uint32_t> map;
      std::string fixed = tok::LossyUtf8(texts[i], &map);
      RETURN_IF_ERROR(p_->EncodeOne(fixed, int32_t(i), int8_t(i), &encs[i]));
      RemapOffsets(&encs[i], 0, map, int8_t(i));
    }
  }
  if (trunc) {
    if (trunc->stride != 0) return Unsupported("truncation stride > 0");
    size_t n_added = (add_special_tokens && p_->post) ? p_->post->AddedTokens(is_pair) : 0;
    if (trunc->max_length < n_added)
      return InvalidArgument("truncation max_length is smaller than the special tokens added");
    if (trunc->max_length > 0) {
      for (auto& e : encs) CapAtWords(&e, trunc->max_length);
    }
    RETURN_IF_ERROR(TruncateEncodings(&encs[0], is_pair ? &encs[1] : nullptr,
                                      trunc->max_length - n_added, trunc->strategy));
  }
  if (p_->post) RETURN_IF_ERROR(p_->post->Process(&encs, add_special_tokens));
  Encoding out;
  if (encs.size() == 1) {
    out = std::move(encs[0]);
  } else {
    tok::MergeEncodings(&encs, &out);
  }
  return out;
}

bool Tokenizer::IsValidUtf8If(std::string_view s) { return tok::IsValidUtf8(s); }

StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                        bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const tok::AddedToken* a = p_->added.ById(id)) {
      if (skip_special_tokens && a->special) continue;
      tokens.push_back(a->content);
      continue;
    }
    auto t = p_->model->IdToToken(id);
    if (!t) continue;
    if (skip_special_tokens && p_->added.IsSpecial(*t)) continue;
    tokens.push_back(std::move(*t));
  }
  if (!p_->decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  RETURN_IF_ERROR(p_->decoder->DecodeChain(&tokens));
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

bool Tokenizer::HasByteLevelDecoder() const { return p_->decoder && p_->decoder->IsByteLevel(); }

std::optional<std::string> Tokenizer::TokenBytes(int32_t id) const {
  if (!HasByteLevelDecoder()) return std::nullopt;
  std::string token;
  if (const tok::AddedToken* a = p_->added.ById(id)) {
    if (a->special) return std::nullopt;
    token = a->content;
  } else {
    auto t = p_->model->IdToToken(id);
    if (!t || p_->added.IsSpecial(*t)) return std::nullopt;
    token = std::move(*t);
  }
  // As the ByteLevel decoder: each character mapped to its byte, or the token as it is when
  // one is outside the byte alphabet.
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    size_t len;
    const int b = tok::CharToByte(tok::DecodeAt(token, i, &len));
    if (b < 0) return token;
    bytes.push_back(static_cast<char>(b));
    i += len;
  }
  return bytes;
}

StatusOr<std::string> Tokenizer::DecodeTokens(std::vector<std::string> tokens) const {
  if (!p_->decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  RETURN_IF_ERROR(p_->decoder->DecodeChain(&tokens));
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string Tokenizer::ContinuingSubwordPrefix() const {
  return p_->model->ContinuingSubwordPrefix();
}

std::optional<int32_t> Tokenizer::UnkId() const {
  if (!config_.unk_token) return std::nullopt;
  return TokenToId(*config_.unk_token);
}

StatusOr<Tokenizer::PairLayout> Tokenizer::PairTemplate() const {
  // Two one-token encodings with sentinel ids through the post-processor: what lands before,
  // between and after them is the template's.
  constexpr int32_t kA = -1, kB = -2;
  std::vector<Encoding> encs(2);
  for (int i = 0; i < 2; ++i) {
    Encoding& e = encs[i];
    e.ids = {i == 0 ? kA : kB};
    e.type_ids = {i};
    e.tokens = {""};
    e.offsets = {{0, 0}};
    e.special_tokens_mask = {0};
    e.sequence_ids = {static_cast<int8_t>(i)};
    e.word_ids = {0};
  }
  if (p_->post) RETURN_IF_ERROR(p_->post->Process(&encs, true));
  Encoding out;
  if (encs.size() == 1) {
    out = std::move(encs[0]);
  } else {
    tok::MergeEncodings(&encs, &out);
  }
  PairLayout l;
  int part = 0;  // 0 prefix, 1 middle, 2 suffix
  for (size_t i = 0; i < out.ids.size(); ++i) {
    const int32_t id = out.ids[i], type = out.type_ids[i];
    if (id == kA || id == kB) {
      if ((id == kA) != (part == 0)) return Internal("unexpected pair template order");
      (id == kA ? l.a_type : l.b_type) = type;
      ++part;
      continue;
    }
    (part == 0 ? l.prefix : part == 1 ? l.middle : l.suffix).push_back(id);
    (part == 0 ? l.prefix_types : part == 1 ? l.middle_types : l.suffix_types).push_back(type);
  }
  if (part != 2) return Internal("the pair template does not hold both texts once");
  return l;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto id = p_->added.TokenToId(token)) return id;
  return p_->model->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const tok::AddedToken* a = p_->added.ById(id)) return a->content;
  return p_->model->IdToToken(id);
}

size_t Tokenizer::vocab_size() const {
  size_t n = p_->model->VocabSize();
  for (const auto& a : p_->added.tokens()) n = std::max(n, static_cast<size_t>(a.id) + 1);
  return n;
}

size_t Tokenizer::NumSpecialTokensToAdd(bool pair) const {
  return p_->post ? p_->post->AddedTokens(pair) : 0;
}

bool Tokenizer::IsSpecialId(int32_t id) const {
  const tok::AddedToken* a = p_->added.ById(id);
  return a && a->special;
}

StatusOr<std::optional<std::string>> DecodeStream::Step(int32_t id) {
  if (prefix_.empty() && !ids_.empty()) {
    ASSIGN_OR_RETURN(std::string p, tok_->Decode(ids_, skip_));
    if (!(p.size() >= 3 && p.compare(p.size() - 3, 3, "\xEF\xBF\xBD") == 0)) {
      prefix_ = std::move(p);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  ASSIGN_OR_RETURN(std::string s, tok_->Decode(ids_, skip_));
  bool ends_bad = s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
  if (s.size() > prefix_.size() && !ends_bad) {
    if (s.compare(0, prefix_.size(), prefix_) != 0) return Internal("DecodeStream: invalid prefix");
    std::string new_text = s.substr(prefix_.size());
    size_t new_prefix_index = ids_.size() - prefix_index_;
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    ASSIGN_OR_RETURN(prefix_, tok_->Decode(ids_, skip_));
    prefix_index_ = new_prefix_index;
    return std::optional<std::string>(std::move(new_text));
  }
  return std::optional<std::string>();
}

}  // namespace sluice
