#include "io/completions.h"

#include <algorithm>
#include <set>

#include "io/json.h"
#include "io/sampling_json.h"
#include "io/structured_json.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

constexpr int kDefaultMaxTokens = 16;  // OpenAI's default for /v1/completions

Status ReadPrompts(simdjson::dom::element e, const Tokenizer* tokenizer,
                   std::vector<std::vector<int32_t>>* out) {
  const std::string what =
      "must be a string, a list of token ids, or a list of strings or of token-id lists";
  auto text = [&](std::string_view s) -> Status {
    if (!tokenizer) {
      return FieldError("prompt",
                        "is text, which needs the model's tokenizer (tokenizer.json); send token "
                        "ids instead");
    }
    ASSIGN_OR_RETURN(Encoding enc, tokenizer->Encode(s, true));
    out->push_back(std::move(enc.ids));
    return Status::Ok();
  };
  auto ids = [&](simdjson::dom::array a, const std::string& path) -> Status {
    std::vector<int32_t> v;
    for (auto x : a) {
      int64_t id;
      if (x.get(id) || id < 0 || id > INT32_MAX) {
        return FieldError(path, "must be a list of token ids (integers >= 0)");
      }
      v.push_back(static_cast<int32_t>(id));
    }
    out->push_back(std::move(v));
    return Status::Ok();
  };
  std::string_view s;
  simdjson::dom::array arr;
  if (!e.get(s)) return text(s);
  if (e.get(arr)) return FieldError("prompt", what);
  if (arr.size() == 0) return FieldError("prompt", "must not be an empty list");
  simdjson::dom::element first = arr.at(0);
  if (first.is_int64() || first.is_uint64()) return ids(arr, "prompt");
  size_t i = 0;
  for (auto x : arr) {
    const std::string path = "prompt[" + std::to_string(i++) + "]";
    simdjson::dom::array inner;
    if (!x.get(s)) {
      RETURN_IF_ERROR(text(s));
    } else if (!x.get(inner)) {
      RETURN_IF_ERROR(ids(inner, path));
    } else {
      return FieldError(path, "must be a string or a list of token ids");
    }
  }
  return Status::Ok();
}

std::string TokenText(const Tokenizer* tok, int32_t id) {
  if (!tok) return "";
  const int32_t one[1] = {id};
  auto s = tok->Decode(one, false);
  return s.ok() ? *s : "";
}

// One entry of the legacy logprobs object: a token and, unless it is the first prompt
// token, its logprob and top logprobs.
struct LpEntry {
  int32_t id;
  const TokenLogprobs* lp;
};

// {"tokens": [...], "token_logprobs": [...], "top_logprobs": [...], "text_offset": [...]}
void WriteLogprobs(JsonWriter& w, const Tokenizer* tok, const std::vector<LpEntry>& entries,
                   size_t offset) {
  std::vector<std::string> texts;
  texts.reserve(entries.size());
  for (const LpEntry& e : entries) texts.push_back(TokenText(tok, e.id));
  w.BeginObject();
  w.Key("tokens");
  w.BeginArray();
  for (const std::string& t : texts) w.String(t);
  w.EndArray();
  w.Key("token_logprobs");
  w.BeginArray();
  for (const LpEntry& e : entries) {
    if (e.lp) {
      w.Float(e.lp->logprob);
    } else {
      w.Null();
    }
  }
  w.EndArray();
  w.Key("top_logprobs");
  w.BeginArray();
  for (size_t i = 0; i < entries.size(); ++i) {
    const LpEntry& e = entries[i];
    if (!e.lp) {
      w.Null();
      continue;
    }
    // The chosen token first, then the top ones; a text two ids share appears once.
    std::set<std::string> seen;
    w.BeginObject();
    seen.insert(texts[i]);
    w.KeyFloat(texts[i], e.lp->logprob);
    for (const auto& [id, v] : e.lp->top) {
      std::string t = TokenText(tok, id);
      if (!seen.insert(t).second) continue;
      w.KeyFloat(t, v);
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("text_offset");
  w.BeginArray();
  for (const std::string& t : texts) {
    w.Int(static_cast<int64_t>(offset));
    offset += t.size();
  }
  w.EndArray();
  w.EndObject();
}

std::string PromptText(const Tokenizer* tok, const GenerateRequest& r) {
  if (!tok) return "";
  auto s = tok->Decode(r.prompt, r.params.skip_special_tokens);
  return s.ok() ? *s : "";
}

// Prompt entries for echo + logprobs: the first token has no logprob.
void AddPromptEntries(const GenerateRequest& r, std::vector<LpEntry>* entries) {
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    const TokenLogprobs* lp =
        i > 0 && i - 1 < r.prompt_logprobs.size() ? &r.prompt_logprobs[i - 1] : nullptr;
    entries->push_back({r.prompt[i], lp});
  }
}

void WriteStopReason(JsonWriter& w, const CompletionOutput& out) {
  w.Key("stop_reason");
  if (out.stop_token) {
    w.Int(*out.stop_token);
  } else if (out.stop_string) {
    w.String(*out.stop_string);
  } else {
    w.Null();
  }
}

void WritePromptLogprobs(JsonWriter& w, const GenerateRequest& r) {
  w.Key("prompt_logprobs");
  w.BeginArray();
  w.Null();  // the first prompt token has no logprob
  for (size_t i = 1; i < r.prompt.size() && i - 1 < r.prompt_logprobs.size(); ++i) {
    const TokenLogprobs& lp = r.prompt_logprobs[i - 1];
    w.BeginObject();
    w.KeyFloat(std::to_string(r.prompt[i]), lp.logprob);
    for (const auto& [id, v] : lp.top) {
      if (id != r.prompt[i]) w.KeyFloat(std::to_string(id), v);
    }
    w.EndObject();
  }
  w.EndArray();
}

void WriteUsage(JsonWriter& w, const CompletionUsage& u) {
  w.Key("usage");
  w.BeginObject();
  w.KeyInt("prompt_tokens", u.prompt_tokens);
  w.KeyInt("completion_tokens", u.completion_tokens);
  w.KeyInt("total_tokens", u.prompt_tokens + u.completion_tokens);
  w.EndObject();
}

void WriteHead(JsonWriter& w, const CompletionContext& ctx) {
  w.KeyString("id", ctx.id);
  w.KeyString("object", "text_completion");
  w.KeyInt("created", ctx.created);
  w.KeyString("model", ctx.model);
  w.KeyString("system_fingerprint", ctx.system_fingerprint);
}

// The end of `text` that can be sent now: everything when finished, else without the
// last `holdback` bytes (a stop string may still start there) and not inside a UTF-8
// character.
size_t SafeEnd(const std::string& text, bool finished, size_t holdback) {
  if (finished) return text.size();
  size_t end = text.size() > holdback ? text.size() - holdback : 0;
  while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  // A lead byte whose character is not complete yet stays back too.
  if (end > 0) {
    size_t lead = end;
    while (lead > 0 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
    if (lead > 0) {
      const unsigned char c = static_cast<unsigned char>(text[lead - 1]);
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (end - (lead - 1) < need) end = lead - 1;
    }
  }
  return end;
}

}  // namespace

StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                   const Tokenizer* tokenizer) {
  ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(body));
  Fields f(obj, "");
  CompletionRequest r;
  RETURN_IF_ERROR(f.GetString("model", &r.model));
  simdjson::dom::element e;
  if (!f.Get("prompt", &e)) return FieldError("prompt", "is required");
  RETURN_IF_ERROR(ReadPrompts(e, tokenizer, &r.prompts));
  if (f.Get("suffix", &e)) {
    return FieldError("suffix", "is not supported (no fill-in-the-middle models are served)");
  }
  RETURN_IF_ERROR(ReadSamplingFields(f, &r.params));
  RETURN_IF_ERROR(ReadStructuredFields(f, &r.params));
  if (f.Get("best_of", &e)) {
    int64_t b;
    if (e.get(b)) return FieldError("best_of", "must be an integer");
    if (b != r.params.n) {
      return FieldError("best_of", "different from n (" + std::to_string(b) + " vs " +
                                       std::to_string(r.params.n) +
                                       ") is not supported: every sampled completion is returned");
    }
  }
  RETURN_IF_ERROR(f.GetBool("echo", &r.echo));
  RETURN_IF_ERROR(ReadStreamAndUser(f, &r.stream, &r.include_usage, &r.user));
  RETURN_IF_ERROR(f.CheckNoUnknown());
  if (!r.params.max_tokens) r.params.max_tokens = kDefaultMaxTokens;
  // echo with logprobs reports the prompt tokens' logprobs too.
  if (r.echo && r.params.logprobs && !r.params.prompt_logprobs) {
    r.params.prompt_logprobs = *r.params.logprobs;
    r.prompt_logprobs_for_echo = true;
  }
  return r;
}

CompletionUsage UsageOf(const std::vector<std::shared_ptr<GenerateRequest>>& results) {
  CompletionUsage u;
  for (const auto& r : results) {
    u.prompt_tokens += static_cast<int64_t>(r->prompt.size());
    for (const CompletionOutput& o : r->outputs) {
      u.completion_tokens += static_cast<int64_t>(o.token_ids.size());
    }
  }
  return u;
}

std::string CompletionResponse(const CompletionContext& ctx, const CompletionRequest& req,
                               const std::vector<std::shared_ptr<GenerateRequest>>& results) {
  JsonWriter w;
  w.BeginObject();
  WriteHead(w, ctx);
  w.Key("choices");
  w.BeginArray();
  const int n = req.params.n;
  for (size_t p = 0; p < results.size(); ++p) {
    const GenerateRequest& r = *results[p];
    const std::string prompt_text = req.echo ? PromptText(ctx.tokenizer, r) : "";
    for (size_t c = 0; c < r.outputs.size(); ++c) {
      const CompletionOutput& out = r.outputs[c];
      w.BeginObject();
      w.KeyInt("index", static_cast<int64_t>(p * static_cast<size_t>(n) + c));
      w.KeyString("text", prompt_text + out.text);
      w.Key("logprobs");
      if (req.params.logprobs) {
        std::vector<LpEntry> entries;
        if (req.echo) AddPromptEntries(r, &entries);
        for (size_t k = 0; k < out.token_ids.size() && k < out.logprobs.size(); ++k) {
          entries.push_back({out.token_ids[k], &out.logprobs[k]});
        }
        WriteLogprobs(w, ctx.tokenizer, entries, 0);
      } else {
        w.Null();
      }
      w.KeyString("finish_reason", out.finish_reason);
      WriteStopReason(w, out);
      if (req.params.prompt_logprobs && !req.prompt_logprobs_for_echo) WritePromptLogprobs(w, r);
      w.EndObject();
    }
  }
  w.EndArray();
  WriteUsage(w, UsageOf(results));
  w.EndObject();
  return w.Take();
}

CompletionStream::CompletionStream(const CompletionContext& ctx, const CompletionRequest& req)
    : ctx_(ctx), req_(req) {
  for (const std::string& s : req.params.stop) holdback_ = std::max(holdback_, s.size() - 1);
  choices_.resize(req.prompts.size() * static_cast<size_t>(req.params.n));
}

std::string CompletionStream::Update(size_t p, const GenerateRequest& r) {
  std::string events;
  for (size_t c = 0; c < r.outputs.size(); ++c) {
    ChoiceState& st = choices_[p * static_cast<size_t>(req_.params.n) + c];
    if (st.finished) continue;
    const CompletionOutput& out = r.outputs[c];
    const bool finished = !out.finish_reason.empty();
    const size_t end = std::max(st.text_sent, SafeEnd(out.text, finished, holdback_));
    std::string text = out.text.substr(st.text_sent, end - st.text_sent);
    const size_t ntok = std::min(out.token_ids.size(),
                                 req_.params.logprobs ? out.logprobs.size() : out.token_ids.size());
    std::vector<LpEntry> entries;
    size_t offset = st.text_sent;
    if (!st.started && req_.echo) {
      const std::string prompt_text = PromptText(ctx_.tokenizer, r);
      text = prompt_text + text;
      if (req_.params.logprobs) AddPromptEntries(r, &entries);
    }
    if (req_.params.logprobs) {
      for (size_t k = st.tokens_sent; k < ntok; ++k) {
        entries.push_back({out.token_ids[k], &out.logprobs[k]});
      }
    }
    const bool news = !text.empty() || !entries.empty();
    if (!news && !finished) continue;
    JsonWriter w;
    w.BeginObject();
    WriteHead(w, ctx_);
    w.Key("choices");
    w.BeginArray();
    w.BeginObject();
    w.KeyInt("index", static_cast<int64_t>(p * static_cast<size_t>(req_.params.n) + c));
    w.KeyString("text", text);
    w.Key("logprobs");
    if (req_.params.logprobs) {
      WriteLogprobs(w, ctx_.tokenizer, entries, offset);
    } else {
      w.Null();
    }
    w.Key("finish_reason");
    if (finished) {
      w.String(out.finish_reason);
    } else {
      w.Null();
    }
    if (finished) {
      WriteStopReason(w, out);
    } else {
      w.Key("stop_reason");
      w.Null();
    }
    if (finished && req_.params.prompt_logprobs && !req_.prompt_logprobs_for_echo) {
      WritePromptLogprobs(w, r);
    }
    w.EndObject();
    w.EndArray();
    if (req_.include_usage) {
      w.Key("usage");
      w.Null();
    }
    w.EndObject();
    events += "data: " + w.Take() + "\n\n";
    st.started = true;
    st.text_sent = end;
    st.tokens_sent = ntok;
    st.finished = finished;
  }
  return events;
}

std::string CompletionStream::Finish(const std::vector<std::shared_ptr<GenerateRequest>>& results) {
  std::string events;
  if (req_.include_usage) {
    JsonWriter w;
    w.BeginObject();
    WriteHead(w, ctx_);
    w.Key("choices");
    w.BeginArray();
    w.EndArray();
    WriteUsage(w, UsageOf(results));
    w.EndObject();
    events += "data: " + w.Take() + "\n\n";
  }
  events += "data: [DONE]\n\n";
  return events;
}

}  // namespace sluice::io
