#include "io/inputs.h"

#include <algorithm>
#include <initializer_list>

#include "io/model_context.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {

Status ReadIds(simdjson::dom::array a, const std::string& path, std::vector<int32_t>* out,
               bool allow_empty) {
  size_t i = 0;
  for (auto v : a) {
    int64_t id;
    if (v.get(id) || id < 0 || id > INT32_MAX) {
      return FieldError(path + "[" + std::to_string(i) + "]",
                        "must be a token id (an integer >= 0)");
    }
    out->push_back(static_cast<int32_t>(id));
    ++i;
  }
  if (out->empty() && !allow_empty) return FieldError(path, "must not be empty");
  return Status::Ok();
}

StatusOr<Item> ReadItem(simdjson::dom::element e, const std::string& path, bool allow_empty) {
  Item it;
  std::string_view s;
  simdjson::dom::array a;
  if (!e.get(s)) {
    if (s.empty() && !allow_empty) return FieldError(path, "must not be an empty string");
    it.text = std::string(s);
  } else if (!e.get(a)) {
    it.is_ids = true;
    RETURN_IF_ERROR(ReadIds(a, path, &it.ids, allow_empty));
  } else {
    return FieldError(path, "must be a string or a list of token ids");
  }
  return it;
}

StatusOr<std::vector<Item>> ReadItems(simdjson::dom::element e, const std::string& path,
                                      bool allow_empty) {
  std::vector<Item> items;
  simdjson::dom::array a;
  if (e.get(a)) {
    ASSIGN_OR_RETURN(Item one, ReadItem(e, path, allow_empty));
    items.push_back(std::move(one));
    return items;
  }
  if (a.size() == 0) return FieldError(path, "must not be an empty list");
  // A flat list of integers is one pre-tokenised input.
  if (a.at(0).is_int64() || a.at(0).is_uint64()) {
    ASSIGN_OR_RETURN(Item one, ReadItem(e, path));
    items.push_back(std::move(one));
    return items;
  }
  size_t i = 0;
  for (auto v : a) {
    ASSIGN_OR_RETURN(Item it, ReadItem(v, path + "[" + std::to_string(i) + "]", allow_empty));
    items.push_back(std::move(it));
    ++i;
  }
  return items;
}

Status CheckCount(const ModelContext& model, size_t n, const std::string& path) {
  if (n == 0) return FieldError(path, "must not be empty");
  if (model.max_inputs_per_request > 0 && n > static_cast<size_t>(model.max_inputs_per_request)) {
    return FieldError(path, "has " + std::to_string(n) + " inputs, over the limit of " +
                                std::to_string(model.max_inputs_per_request) +
                                " per request (--max-inputs-per-request)");
  }
  return Status::Ok();
}

Status ReadTruncatePromptTokens(Fields& f, Truncate* t) {
  int64_t v = INT64_MIN;
  RETURN_IF_ERROR(f.GetInt("truncate_prompt_tokens", &v));
  if (v == INT64_MIN) return Status::Ok();
  if (v < -1 || v == 0 || v > INT32_MAX) {
    return FieldError("truncate_prompt_tokens", "must be -1 (the limit) or a positive number");
  }
  t->tokens = static_cast<int>(v);
  return Status::Ok();
}

int EffectiveLimit(const ModelContext& model, const Truncate& t, bool* truncating) {
  int limit = model.max_tokens_per_input;
  *truncating = false;
  if (t.tokens > 0) {
    limit = std::min(limit, t.tokens);
    *truncating = true;
  } else if (t.tokens < 0 || model.truncate_by_default) {
    *truncating = true;
  }
  return limit;
}

namespace {

Status TooLong(const std::string& path, size_t n, int limit, const ModelContext& model) {
  const bool model_limit = limit == model.model_max_tokens;
  return OutOfRange("\"" + path + "\" has " + std::to_string(n) + " tokens, over the limit of " +
                    std::to_string(limit) + " tokens per input (" +
                    (model_limit ? "the model's maximum" : "--max-tokens-per-input") +
                    "); shorten it or ask for truncation (\"truncate_prompt_tokens\" or "
                    "\"truncate\")");
}

Status NoTokenizer(const std::string& path) {
  return FieldError(path,
                    "is text, but this model has no tokenizer (tokenizer.json); send "
                    "token ids instead");
}

}  // namespace

void MarkQueryExpansion(const ModelContext& model, TokenSequence* s) {
  if (!model.late_interaction || model.query_length <= 0 || model.query_expansion_attended) return;
  size_t n = s->ids.size();
  while (n > 0 && s->ids[n - 1] == model.query_mask_id) --n;
  // Only [MASK] tokens: nothing else to attend, so they attend each other.
  s->attended = n < s->ids.size() && n > 0 ? static_cast<int32_t>(n) : 0;
}

std::vector<int32_t> SkiplistIds(const Tokenizer& tok, const std::vector<std::string>& words) {
  std::vector<int32_t> ids;
  for (const std::string& w : words) {
    std::optional<int32_t> id = tok.TokenToId(w);
    if (!id) id = tok.UnkId();
    if (id) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

bool IsMarkedDocument(const ModelContext& model, const TokenSequence& s) {
  return model.late_interaction && model.document_prefix_id >= 0 && s.ids.size() > 1 &&
         s.ids[1] == model.document_prefix_id;
}

StatusOr<TokenSequence> EncodeOne(const ModelContext& model, const Item& item, const Truncate& t,
                                  const std::string& path) {
  bool truncating;
  const int limit = EffectiveLimit(model, t, &truncating);
  TokenSequence s;
  if (item.is_ids) {
    s.ids = item.ids;
  } else {
    if (!model.tokenizer) return NoTokenizer(path);
    TruncationParams tp;
    tp.max_length = static_cast<size_t>(limit);
    auto enc = model.tokenizer->Encode(item.text, true, truncating ? &tp : nullptr);
    if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
    s.ids = std::move(enc->ids);
    if (model.uses_token_types) s.type_ids = std::move(enc->type_ids);
  }
  if (s.ids.size() > static_cast<size_t>(limit)) {
    if (!truncating) return TooLong(path, s.ids.size(), limit, model);
    s.ids.resize(limit);
    if (!s.type_ids.empty()) s.type_ids.resize(limit);
  }
  return s;
}

namespace {

// prompt_prefix + the middle parts + prompt_suffix; truncation cuts the middle from its
// end so that the suffix (where the yes/no logits are read) stays.
StatusOr<TokenSequence> AssembleCausal(const ModelContext& model,
                                       std::initializer_list<const std::vector<int32_t>*> middle,
                                       int limit, bool truncating, const std::string& path) {
  const size_t fixed = model.prompt_prefix.size() + model.prompt_suffix.size();
  size_t n = 0;
  for (const auto* part : middle) n += part->size();
  if (fixed + n > static_cast<size_t>(limit)) {
    if (!truncating || fixed >= static_cast<size_t>(limit)) {
      return TooLong(path, fixed + n, limit, model);
    }
    n = limit - fixed;
  }
  TokenSequence s;
  s.ids.reserve(fixed + n);
  s.ids = model.prompt_prefix;
  for (const auto* part : middle) {  // the parts in order until n of their tokens are in
    const size_t k = std::min(n, part->size());
    s.ids.insert(s.ids.end(), part->begin(), part->begin() + static_cast<long>(k));
    n -= k;
  }
  s.ids.insert(s.ids.end(), model.prompt_suffix.begin(), model.prompt_suffix.end());
  return s;
}

// The tokens of "<Instruct>: {instruction}\n<Query>: {a}\n<Document>: {b}" in the middle.
// Token-id pairs are decoded to text first (special tokens kept) and rendered the same way:
// the template's "<Query>: " ends in a space that a byte-level BPE merges into the query's
// first word, so ids of the query tokenised alone (/tokenize) could not be spliced in and
// give the text's tokens; decoding gives exactly the text path's sequence (byte-level BPE
// decodes losslessly).
StatusOr<TokenSequence> EncodeCausalPair(const ModelContext& model, const Item& a, const Item& b,
                                         int limit, bool truncating, const std::string& path,
                                         const std::string& instruction) {
  std::string qa = a.text, qb = b.text;
  if (a.is_ids) {
    auto da = model.tokenizer->Decode(a.ids, /*skip_special_tokens=*/false);
    auto db = model.tokenizer->Decode(b.ids, /*skip_special_tokens=*/false);
    if (!da.ok() || !db.ok()) {
      return FieldError(path, "holds token ids that cannot be decoded: " +
                                  (da.ok() ? db.status() : da.status()).message());
    }
    qa = std::move(da).value();
    qb = std::move(db).value();
  }
  const std::string body =
      "<Instruct>: " + (instruction.empty() ? model.default_instruction : instruction) +
      "\n<Query>: " + qa + "\n<Document>: " + qb;
  auto enc = model.tokenizer->Encode(body, /*add_special_tokens=*/false);
  if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
  return AssembleCausal(model, {&enc->ids}, limit, truncating, path);
}

}  // namespace

StatusOr<TokenSequence> EncodePair(const ModelContext& model, const Item& a, const Item& b,
                                   const Truncate& t, const std::string& path,
                                   const std::string& instruction) {
  bool truncating;
  const int limit = EffectiveLimit(model, t, &truncating);
  if (!instruction.empty() && !model.causal_reranker) {
    return FieldError("instruction", "applies to causal-LM rerankers (with a tokenizer) only");
  }
  TokenSequence s;
  if (a.is_ids == b.is_ids && model.causal_reranker) {
    return EncodeCausalPair(model, a, b, limit, truncating, path, instruction);
  }
  if (!a.is_ids && !b.is_ids) {
    if (!model.tokenizer) return NoTokenizer(path);
    TruncationParams tp;
    tp.max_length = static_cast<size_t>(limit);
    tp.strategy = TruncationStrategy::kOnlySecond;
    auto enc = model.tokenizer->EncodePair(a.text, b.text, true, truncating ? &tp : nullptr);
    if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
    s.ids = std::move(enc->ids);
    if (model.uses_token_types) s.type_ids = std::move(enc->type_ids);
  } else if (a.is_ids && b.is_ids) {
    const size_t fixed = model.pair_prefix.size() + a.ids.size() + model.pair_separator.size() +
                         model.pair_suffix.size();
    size_t b_len = b.ids.size();
    if (fixed + b_len > static_cast<size_t>(limit)) {
      if (!truncating || fixed >= static_cast<size_t>(limit)) {
        return TooLong(path, fixed + b_len, limit, model);
      }
      b_len = limit - fixed;  // the document loses its tail; the suffix stays
    }
    auto& ids = s.ids;
    ids.reserve(fixed + b_len);
    ids.insert(ids.end(), model.pair_prefix.begin(), model.pair_prefix.end());
    ids.insert(ids.end(), a.ids.begin(), a.ids.end());
    ids.insert(ids.end(), model.pair_separator.begin(), model.pair_separator.end());
    ids.insert(ids.end(), b.ids.begin(), b.ids.begin() + static_cast<long>(b_len));
    ids.insert(ids.end(), model.pair_suffix.begin(), model.pair_suffix.end());
    if (model.uses_token_types) {
      auto& types = s.type_ids;
      types = model.pair_prefix_types;
      types.resize(types.size() + a.ids.size(), model.pair_a_type);
      types.insert(types.end(), model.pair_separator_types.begin(),
                   model.pair_separator_types.end());
      types.resize(types.size() + b_len, model.pair_b_type);
      types.insert(types.end(), model.pair_suffix_types.begin(), model.pair_suffix_types.end());
    }
    return s;
  } else {
    return FieldError(path, "mixes text and token ids; send both as text or both as token ids");
  }
  if (s.ids.size() > static_cast<size_t>(limit)) return TooLong(path, s.ids.size(), limit, model);
  return s;
}

StatusOr<Encoding> EncodeText(const ModelContext& model, std::string_view a, const std::string* b,
                              const Truncate& t, const std::string& path) {
  if (!model.tokenizer) return NoTokenizer(path);
  bool truncating;
  const int limit = EffectiveLimit(model, t, &truncating);
  TruncationParams tp;
  tp.max_length = static_cast<size_t>(limit);
  tp.strategy = b ? TruncationStrategy::kOnlySecond : TruncationStrategy::kLongestFirst;
  auto enc = b ? model.tokenizer->EncodePair(a, *b, true, truncating ? &tp : nullptr)
               : model.tokenizer->Encode(a, true, truncating ? &tp : nullptr);
  if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
  if (enc->size() > static_cast<size_t>(limit)) return TooLong(path, enc->size(), limit, model);
  return std::move(enc).value();
}

TokenSequence ToSequence(const ModelContext& model, const Encoding& enc) {
  TokenSequence s;
  s.ids = enc.ids;
  if (model.uses_token_types) s.type_ids = enc.type_ids;
  return s;
}

Status CheckQueryFits(const ModelContext& model, const Item& query, const Truncate& t,
                      const std::string& path, const std::string& instruction) {
  if (model.late_interaction) return Status::Ok();  // queries are encoded on their own
  bool truncating;
  const int limit = EffectiveLimit(model, t, &truncating);
  size_t n = 0;
  if (model.causal_reranker) {
    std::string q = query.text;
    if (query.is_ids) {
      auto d = model.tokenizer->Decode(query.ids, false);
      if (!d.ok()) return FieldError(path, "holds token ids that cannot be decoded");
      q = std::move(d).value();
    }
    auto enc = model.tokenizer->Encode(
        "<Instruct>: " + (instruction.empty() ? model.default_instruction : instruction) +
            "\n<Query>: " + q + "\n<Document>: ",
        false);
    if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
    n = enc->size() + model.prompt_prefix.size() + model.prompt_suffix.size();
  } else if (query.is_ids) {
    n = query.ids.size() + model.pair_prefix.size() + model.pair_separator.size() +
        model.pair_suffix.size();
  } else if (model.tokenizer) {
    auto enc = model.tokenizer->Encode(query.text, false);
    if (!enc.ok()) return FieldError(path, "could not be tokenised: " + enc.status().message());
    n = enc->size() + model.tokenizer->NumSpecialTokensToAdd(true);
  } else {
    return Status::Ok();  // text without a tokenizer: EncodePair says so
  }
  if (n < static_cast<size_t>(limit)) return Status::Ok();
  const bool model_limit = limit == model.model_max_tokens;
  return OutOfRange("\"" + path + "\" has " + std::to_string(n) +
                    " tokens with the special tokens of a pair, leaving no room for a document "
                    "under the limit of " +
                    std::to_string(limit) + " tokens per input (" +
                    (model_limit ? "the model's maximum" : "--max-tokens-per-input") +
                    "); shorten the query (truncation only shortens documents)");
}

std::optional<std::string> DocumentText(const ModelContext& model, const Item& doc) {
  if (!doc.is_ids) return doc.text;
  if (!model.tokenizer) return std::nullopt;
  auto d = model.tokenizer->Decode(doc.ids, false);
  if (!d.ok()) return std::nullopt;
  return std::move(d).value();
}

Status CheckModelName(const ModelContext& model, const std::string& requested) {
  if (!requested.empty() && requested != model.name &&
      requested != model.name + ":" + model.version) {
    return Status(StatusCode::kNotFound, "model \"" + requested +
                                             "\" is not served here (this server serves \"" +
                                             model.name + "\")");
  }
  return Status::Ok();
}

}  // namespace sluice::io
