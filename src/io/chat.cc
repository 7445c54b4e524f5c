#include "io/chat.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "io/json.h"
#include "io/sampling_json.h"
#include "io/structured_json.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>", kToolClose = "</tool_call>";

std::string Minify(simdjson::dom::element e) { return simdjson::minify(e); }

// Writes one validated, normalised message into `w`.
Status WriteMessage(simdjson::dom::element e, size_t i, JsonWriter& w, std::string* role_out) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  simdjson::dom::object obj;
  if (e.get(obj)) return FieldError(where, "must be an object");
  Fields f(obj, where);
  std::string role;
  RETURN_IF_ERROR(f.GetString("role", &role));
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles)) {
    return FieldError(where + ".role", role.empty() ? "is required"
                                                    : "\"" + role +
                                                          "\" is not one of system, developer, "
                                                          "user, assistant, tool");
  }
  // Content: a string, or text parts joined; null only for an assistant with tool calls.
  std::optional<std::string> content;
  simdjson::dom::element ce;
  if (f.Get("content", &ce)) {
    std::string_view sv;
    simdjson::dom::array parts;
    if (!ce.get(sv)) {
      content = std::string(sv);
    } else if (!ce.get(parts)) {
      std::string joined;
      size_t j = 0;
      for (auto part : parts) {
        const std::string pw = where + ".content[" + std::to_string(j++) + "]";
        simdjson::dom::object po;
        if (part.get(po)) return FieldError(pw, "must be an object");
        Fields pf(po, pw);
        std::string type, text;
        RETURN_IF_ERROR(pf.GetString("type", &type));
        if (type == "image_url" || type == "image" || type == "input_image" ||
            type == "input_audio" || type == "video_url" || type == "audio_url") {
          return FieldError(pw, "is a " + type + " part; this model takes text only");
        }
        if (type != "text") return FieldError(pw + ".type", "must be \"text\"");
        RETURN_IF_ERROR(pf.GetString("text", &text));
        RETURN_IF_ERROR(pf.CheckNoUnknown());
        if (!joined.empty()) joined += "\n";
        joined += text;
      }
      content = std::move(joined);
    } else {
      return FieldError(where + ".content", "must be a string or a list of text parts");
    }
  }
  std::string name, tool_call_id, reasoning;
  RETURN_IF_ERROR(f.GetString("name", &name));
  RETURN_IF_ERROR(f.GetString("tool_call_id", &tool_call_id));
  RETURN_IF_ERROR(f.GetString("reasoning_content", &reasoning));
  simdjson::dom::element tce;
  const bool has_calls = f.Get("tool_calls", &tce);
  RETURN_IF_ERROR(f.CheckNoUnknown());
  if (role == "tool" && tool_call_id.empty()) {
    return FieldError(where + ".tool_call_id", "is required for a tool message");
  }
  if (role != "tool" && !tool_call_id.empty()) {
    return FieldError(where + ".tool_call_id", "is only for tool messages");
  }
  if (has_calls && role != "assistant") {
    return FieldError(where + ".tool_calls", "is only for assistant messages");
  }
  if (!reasoning.empty() && role != "assistant") {
    return FieldError(where + ".reasoning_content", "is only for assistant messages");
  }
  if (!content && !(role == "assistant" && has_calls)) {
    return FieldError(where + ".content", "is required");
  }
  // developer is OpenAI's newer name for system; templates know system.
  w.BeginObject();
  w.KeyString("role", role == "developer" ? "system" : role);
  w.Key("content");
  if (content) {
    w.String(*content);
  } else {
    w.Null();
  }
  if (!name.empty()) w.KeyString("name", name);
  if (!tool_call_id.empty()) w.KeyString("tool_call_id", tool_call_id);
  if (!reasoning.empty()) w.KeyString("reasoning_content", reasoning);
  if (has_calls) {
    simdjson::dom::array calls;
    if (tce.get(calls)) return FieldError(where + ".tool_calls", "must be a list");
    w.Key("tool_calls");
    w.BeginArray();
    size_t k = 0;
    for (auto call : calls) {
      const std::string cw = where + ".tool_calls[" + std::to_string(k++) + "]";
      simdjson::dom::object co, fo;
      if (call.get(co)) return FieldError(cw, "must be an object");
      Fields cf(co, cw);
      std::string id, type = "function";
      RETURN_IF_ERROR(cf.GetString("id", &id));
      RETURN_IF_ERROR(cf.GetString("type", &type));
      simdjson::dom::element fe;
      if (!cf.Get("function", &fe) || fe.get(fo)) {
        return FieldError(cw + ".function", "must be an object {name, arguments}");
      }
      RETURN_IF_ERROR(cf.CheckNoUnknown());
      if (id.empty()) return FieldError(cw + ".id", "is required");
      if (type != "function") return FieldError(cw + ".type", "must be \"function\"");
      Fields ff(fo, cw + ".function");
      std::string fname, args = "{}";
      RETURN_IF_ERROR(ff.GetString("name", &fname));
      RETURN_IF_ERROR(ff.GetString("arguments", &args));
      RETURN_IF_ERROR(ff.CheckNoUnknown());
      if (fname.empty()) return FieldError(cw + ".function.name", "is required");
      simdjson::dom::parser ap;
      simdjson::dom::element parsed;
      if (ap.parse(args).get(parsed)) {
        return FieldError(cw + ".function.arguments", "must be a JSON string of an object");
      }
      w.BeginObject();
      w.KeyString("id", id);
      w.KeyString("type", "function");
      w.Key("function");
      w.BeginObject();
      w.KeyString("name", fname);
      w.Key("arguments");
      w.Raw(Minify(parsed));  // an object, as vLLM hands it to templates
      w.EndObject();
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  *role_out = role;
  return Status::Ok();
}

std::string TokenText(const Tokenizer* tok, int32_t id) {
  if (!tok) return "";
  const int32_t one[1] = {id};
  auto s = tok->Decode(one, false);
  return s.ok() ? *s : "";
}

void WriteTokenLp(JsonWriter& w, const std::string& text, float lp) {
  w.KeyString("token", text);
  w.KeyFloat("logprob", lp);
  w.Key("bytes");
  w.BeginArray();
  for (unsigned char ch : text) w.Int(ch);
  w.EndArray();
}

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}
void WriteChatLogprobs(JsonWriter& w, const Tokenizer* tok, const CompletionOutput& o, size_t from,
                       size_t to, int top) {
  w.BeginObject();
  w.Key("content");
  w.BeginArray();
  for (size_t k = from; k < to && k < o.logprobs.size(); ++k) {
    const TokenLogprobs& lp = o.logprobs[k];
    w.BeginObject();
    WriteTokenLp(w, TokenText(tok, o.token_ids[k]), lp.logprob);
    w.Key("top_logprobs");
    w.BeginArray();
    int n = 0;
    for (const auto& [id, v] : lp.top) {
      if (n++ >= top) break;
      w.BeginObject();
      WriteTokenLp(w, TokenText(tok, id), v);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

void WriteHead(JsonWriter& w, const ChatContext& ctx, const char* object) {
  w.KeyString("id", ctx.id);
  w.KeyString("object", object);
  w.KeyInt("created", ctx.created);
  w.KeyString("model", ctx.model);
  w.KeyString("system_fingerprint", ctx.system_fingerprint);
}

void WriteToolCalls(JsonWriter& w, const std::vector<ParsedToolCall>& calls, bool with_index) {
  w.Key("tool_calls");
  w.BeginArray();
  for (size_t i = 0; i < calls.size(); ++i) {
    w.BeginObject();
    if (with_index) w.KeyInt("index", static_cast<int64_t>(i));
    w.KeyString("id", calls[i].id);
    w.KeyString("type", "function");
    w.Key("function");
    w.BeginObject();
    w.KeyString("name", calls[i].name);
    w.KeyString("arguments", calls[i].arguments);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
}

void WriteUsage(JsonWriter& w, const GenerateRequest& r) {
  int64_t gen = 0;
  for (const CompletionOutput& o : r.outputs) gen += static_cast<int64_t>(o.token_ids.size());
  const auto prompt = static_cast<int64_t>(r.prompt.size());
  w.Key("usage");
  w.BeginObject();
  w.KeyInt("prompt_tokens", prompt);
  w.KeyInt("completion_tokens", gen);
  w.KeyInt("total_tokens", prompt + gen);
  w.EndObject();
}

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string LStrip(std::string s) {
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  return s.substr(i);
}

std::string RStrip(std::string s) {
  while (!s.empty() && IsSpace(s.back())) s.pop_back();
  return s;
}

// Where `text` could still complete `tag` at its end: the start of the longest suffix of
// text that is a proper prefix of tag (text.size() when none).
size_t PartialTagStart(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return text.size() - n;
  }
  return text.size();
}

// Back off to the start of an incomplete UTF-8 character at the end.
size_t Utf8Safe(std::string_view text, size_t end) {
  size_t lead = end;
  while (lead > 0 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead == 0) return end;
  const unsigned char c = static_cast<unsigned char>(text[lead - 1]);
  const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return end - (lead - 1) < need ? lead - 1 : end;
}

std::vector<ParsedToolCall> ParseToolCalls(std::string_view text, const std::string& id_prefix,
                                           std::string* rest) {
  std::vector<ParsedToolCall> calls;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kToolOpen, pos);
    if (open == std::string_view::npos) break;
    const size_t body = open + kToolOpen.size();
    const size_t close = text.find(kToolClose, body);
    const std::string_view json =
        text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    simdjson::dom::parser p;
    simdjson::dom::element e;
    std::string_view name;
    if (p.parse(std::string(json)).get(e) || e["name"].get(name)) {
      break;  // not a well-formed call: the text stays content
    }
    ParsedToolCall c;
    char id[48];
    std::snprintf(id, sizeof id, "%s%zu", id_prefix.c_str(), calls.size());
    c.id = id;
    c.name = std::string(name);
    simdjson::dom::element args;
    c.arguments = e["arguments"].get(args) ? "{}" : Minify(args);
    if (calls.empty()) *rest = std::string(text.substr(0, open));
    calls.push_back(std::move(c));
    if (close == std::string_view::npos) break;
    pos = close + kToolClose.size();
  }
  return calls;
}

}  // namespace

Status ReadChatTemplateFields(Fields& f, const ChatTokens& tokens, ChatRequest* out) {
  ChatRequest& r = *out;
  simdjson::dom::element e;
  simdjson::dom::array msgs;
  if (!f.Get("messages", &e)) return FieldError("messages", "is required");
  if (e.get(msgs) || msgs.size() == 0) return FieldError("messages", "must be a non-empty list");
  JsonWriter ctx;
  ctx.BeginObject();
  ctx.Key("messages");
  ctx.BeginArray();
  size_t i = 0;
  std::string last_role;
  for (auto m : msgs) RETURN_IF_ERROR(WriteMessage(m, i++, ctx, &last_role));
  ctx.EndArray();
  // Tools: rendered through the template; tool_choice "none" leaves them out. "required", a
  // named function and strict tools constrain the output (structured/tool_calls.h).
  std::string tool_choice = "auto", named;
  simdjson::dom::element tc;
  if (f.Get("tool_choice", &tc)) {
    std::string_view sv;
    simdjson::dom::object to;
    if (!tc.get(to)) {
      std::string_view type, name;
      simdjson::dom::object fo;
      if (to["type"].get(type) || type != "function" || to["function"].get(fo) ||
          fo["name"].get(name) || name.empty()) {
        return FieldError("tool_choice",
                          "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": \"...\"}}");
      }
      tool_choice = "named";
      named = std::string(name);
    } else if (tc.get(sv) || (sv != "auto" && sv != "none" && sv != "required")) {
      return FieldError("tool_choice",
                        "must be \"auto\", \"none\", \"required\" or a named function");
    } else {
      tool_choice = std::string(sv);
    }
  }
  structured::ToolCallSpec spec;
  bool any_strict = false, named_found = false;
  simdjson::dom::element te;
  if (f.Get("tools", &te)) {
    simdjson::dom::array tools;
    if (te.get(tools)) return FieldError("tools", "must be a list");
    size_t k = 0;
    for (auto t : tools) {
      const std::string tw = "tools[" + std::to_string(k++) + "]";
      std::string_view type, name;
      simdjson::dom::object fo;
      if (t["type"].get(type) || type != "function" || t["function"].get(fo) ||
          fo["name"].get(name)) {
        return FieldError(tw, "must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
      }
      bool strict = false;
      simdjson::dom::element se;
      if (!fo["strict"].get(se) && se.get(strict)) {
        return FieldError(tw + ".function.strict", "must be a boolean");
      }
      structured::ToolCallTool tool;
      tool.name = std::string(name);
      tool.field = tw + ".function.parameters";
      simdjson::dom::element pe;
      if (!fo["parameters"].get(pe)) {
        if (pe.type() != simdjson::dom::element_type::OBJECT) {
          return FieldError(tool.field, "must be a JSON Schema (an object)");
        }
        tool.parameters = Minify(pe);
      }
      // Under "auto" only strict tools' arguments follow their schema; under "required" and
      // a named function every tool's do.
      tool.enforce = strict || tool_choice != "auto";
      any_strict |= strict;
      if (tool_choice == "named" && tool.name != named) continue;
      named_found |= tool_choice == "named";
      spec.tools.push_back(std::move(tool));
    }
    if (tools.size() > 0 && tool_choice != "none") {
      ctx.Key("tools");
      ctx.Raw(Minify(te));
      r.tools_given = true;
    }
  }
  if ((tool_choice == "required" || tool_choice == "named") && !r.tools_given) {
    return FieldError(
        "tool_choice",
        "\"" + std::string(tool_choice == "named" ? named : "required") + "\" needs \"tools\"");
  }
  if (tool_choice == "named" && !named_found) {
    return FieldError("tool_choice.function.name", "\"" + named + "\" is not one of the tools");
  }
  if (tool_choice == "required" || tool_choice == "named" ||
      (tool_choice == "auto" && any_strict && r.tools_given)) {
    spec.mode = tool_choice == "required" ? structured::ToolCallSpec::Mode::kRequired
                : tool_choice == "named"  ? structured::ToolCallSpec::Mode::kNamed
                                          : structured::ToolCallSpec::Mode::kAuto;
    r.tool_calls = std::move(spec);
    r.tool_calls_field = tool_choice == "auto" ? "tools (strict)" : "tool_choice";
  }
  bool parallel = true;
  RETURN_IF_ERROR(f.GetBool("parallel_tool_calls", &parallel));
  if (!parallel) {
    return FieldError("parallel_tool_calls",
                      "false is not supported (every parsed call is "
                      "returned)");
  }
  RETURN_IF_ERROR(f.GetBool("add_generation_prompt", &r.add_generation_prompt));
  RETURN_IF_ERROR(f.GetBool("continue_final_message", &r.continue_final_message));
  if (r.continue_final_message && r.add_generation_prompt) {
    return FieldError("continue_final_message",
                      "and add_generation_prompt cannot both be true (set "
                      "\"add_generation_prompt\": false)");
  }
  if (r.continue_final_message && last_role != "assistant") {
    return FieldError("continue_final_message", "needs an assistant message last");
  }
  ctx.Key("add_generation_prompt");
  ctx.Bool(r.add_generation_prompt);
  ctx.Key("continue_final_message");
  ctx.Bool(r.continue_final_message);
  ctx.KeyString("bos_token", tokens.bos);
  ctx.KeyString("eos_token", tokens.eos);
  std::string tmpl;
  RETURN_IF_ERROR(f.GetString("chat_template", &tmpl));
  if (!tmpl.empty()) r.chat_template = tmpl;
  simdjson::dom::element ke;
  if (f.Get("chat_template_kwargs", &ke)) {
    simdjson::dom::object kw;
    if (ke.get(kw)) return FieldError("chat_template_kwargs", "must be an object");
    for (auto kv : kw) {
      const std::string key(kv.key);
      static const char* kReserved[] = {
          "messages",  "tools",    "add_generation_prompt", "continue_final_message",
          "bos_token", "eos_token"};
      if (std::find(std::begin(kReserved), std::end(kReserved), key) != std::end(kReserved)) {
        return FieldError("chat_template_kwargs." + key, "is set by the request itself");
      }
      ctx.Key(key);
      ctx.Raw(Minify(kv.value));
    }
  }
  ctx.EndObject();
  r.context_json = ctx.Take();
  return Status::Ok();
}

StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const ChatTokens& tokens) {
  ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(body));
  Fields f(obj, "");
  ChatRequest r;
  RETURN_IF_ERROR(f.GetString("model", &r.model));
  RETURN_IF_ERROR(ReadChatTemplateFields(f, tokens, &r));
  simdjson::dom::element e;
  RETURN_IF_ERROR(ReadSamplingFields(f, &r.params, /*openai_logprobs=*/false));
  RETURN_IF_ERROR(ReadStructuredFields(f, &r.params));
  if (r.tool_calls && r.params.constraint) {
    return InvalidArgument("several structured-output constraints in one request (" +
                           r.tool_calls_field + ", " + r.params.constraint->field + "); give one");
  }
  // Chat logprobs: a boolean plus top_logprobs.
  bool logprobs = false;
  RETURN_IF_ERROR(f.GetBool("logprobs", &logprobs));
  int64_t top = -1;
  RETURN_IF_ERROR(f.GetInt("top_logprobs", &top));
  if (top >= 0 && !logprobs) return FieldError("top_logprobs", "needs \"logprobs\": true");
  if (logprobs) r.params.logprobs = static_cast<int>(std::max<int64_t>(top, 0));
  // max_completion_tokens (current) or max_tokens (deprecated), not both.
  int64_t mct = -1;
  RETURN_IF_ERROR(f.GetInt("max_completion_tokens", &mct));
  if (mct >= 0) {
    if (r.params.max_tokens) {
      return FieldError("max_completion_tokens", "and max_tokens cannot both be given");
    }
    r.params.max_tokens = static_cast<int>(std::min<int64_t>(mct, 1 << 30));
  }
  RETURN_IF_ERROR(ReadStreamAndUser(f, &r.stream, &r.include_usage, &r.user));
  RETURN_IF_ERROR(f.CheckNoUnknown());
  return r;
}

std::optional<structured::ConstraintSpec> ToolCallConstraint(const ChatRequest& req,
                                                             bool thinking) {
  if (!req.tool_calls) return std::nullopt;
  structured::ToolCallSpec spec = *req.tool_calls;
  spec.reasoning = thinking;
  structured::ConstraintSpec c;
  c.kind = structured::ConstraintSpec::Kind::kToolCalls;
  c.text = structured::EncodeToolCallSpec(spec);
  c.field = req.tool_calls_field;
  return c;
}

bool PromptOpensThinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  return prompt.find(kThinkClose, open) == std::string_view::npos;
}

ParsedChatOutput ParseChatOutput(const std::string& text, bool thinking, bool tools,
                                 const std::string& id_prefix) {
  ParsedChatOutput out;
  std::string rest = text;
  size_t lead = 0;
  while (lead < rest.size() && IsSpace(rest[lead])) ++lead;
  if (!thinking && rest.compare(lead, kThinkOpen.size(), kThinkOpen) == 0) {
    thinking = true;
    rest = rest.substr(lead + kThinkOpen.size());
  }
  if (thinking) {
    const size_t close = rest.find(kThinkClose);
    if (close == std::string::npos) {
      out.reasoning = rest;
      return out;
    }
    out.reasoning = rest.substr(0, close);
    rest = LStrip(rest.substr(close + kThinkClose.size()));
  }
  if (tools) {
    std::string before;
    out.tool_calls = ParseToolCalls(rest, id_prefix, &before);
    if (!out.tool_calls.empty()) rest = RStrip(before);
  }
  out.content = rest;
  return out;
}

std::string ChatResponse(const ChatContext& ctx, const ChatRequest& req, const GenerateRequest& r) {
  JsonWriter w;
  w.BeginObject();
  WriteHead(w, ctx, "chat.completion");
  w.Key("choices");
  w.BeginArray();
  for (size_t c = 0; c < r.outputs.size(); ++c) {
    const CompletionOutput& o = r.outputs[c];
    const ParsedChatOutput p =
        ParseChatOutput(o.text, ctx.thinking, req.tools_given,
                        "call_" + ctx.id.substr(std::min<size_t>(ctx.id.size(), 9)) + "_" +
                            std::to_string(c) + "_");
    w.BeginObject();
    w.KeyInt("index", static_cast<int64_t>(c));
    w.Key("message");
    w.BeginObject();
    w.KeyString("role", "assistant");
    w.Key("content");
    if (p.content.empty() && (!p.tool_calls.empty() || p.reasoning)) {
      w.Null();
    } else {
      w.String(p.content);
    }
    if (p.reasoning) w.KeyString("reasoning_content", *p.reasoning);
    if (!p.tool_calls.empty()) WriteToolCalls(w, p.tool_calls, false);
    w.EndObject();
    w.Key("logprobs");
    if (req.params.logprobs) {
      WriteChatLogprobs(w, ctx.tokenizer, o, 0, o.token_ids.size(), *req.params.logprobs);
    } else {
      w.Null();
    }
    w.KeyString("finish_reason", !p.tool_calls.empty() ? "tool_calls" : o.finish_reason);
    w.Key("stop_reason");
    if (o.stop_token) {
      w.Int(*o.stop_token);
    } else if (o.stop_string) {
      w.String(*o.stop_string);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
  WriteUsage(w, r);
  w.EndObject();
  return w.Take();
}

ChatStream::ChatStream(const ChatContext& ctx, const ChatRequest& req)
    : ctx_(ctx), req_(req), choices_(static_cast<size_t>(req.params.n)) {}

std::string ChatStream::Chunk(size_t index, const std::string& field, const std::string& value,
                              const std::string& extra_json) {
  JsonWriter w;
  w.BeginObject();
  WriteHead(w, ctx_, "chat.completion.chunk");
  w.Key("choices");
  w.BeginArray();
  w.BeginObject();
  w.KeyInt("index", static_cast<int64_t>(index));
  w.Key("delta");
  w.BeginObject();
  if (!field.empty()) w.KeyString(field, value);
  w.EndObject();
  w.str() += extra_json;  // ,"logprobs":...,"finish_reason":...
  w.EndObject();
  w.EndArray();
  if (req_.include_usage) {
    w.Key("usage");
    w.Null();
  }
  w.EndObject();
  return "data: " + w.Take() + "\n\n";
}

std::string ChatStream::Update(const GenerateRequest& r) {
  std::string events;
  for (size_t c = 0; c < r.outputs.size() && c < choices_.size(); ++c) {
    Choice& st = choices_[c];
    if (st.finished) continue;
    const CompletionOutput& o = r.outputs[c];
    const bool finished = !o.finish_reason.empty();
    const std::string& t = o.text;
    std::string logprobs_json;
    auto take_logprobs = [&]() {
      if (!req_.params.logprobs || st.tokens_sent >= o.token_ids.size()) {
        return std::string(",\"logprobs\":null");
      }
      JsonWriter lw;
      WriteChatLogprobs(lw, ctx_.tokenizer, o, st.tokens_sent, o.token_ids.size(),
                        *req_.params.logprobs);
      st.tokens_sent = o.token_ids.size();
      return ",\"logprobs\":" + lw.Take();
    };
    if (!st.role_sent) {
      events += Chunk(c, "role", "assistant", ",\"logprobs\":null,\"finish_reason\":null");
      st.role_sent = true;
    }
    // Decide the mode once enough text is there.
    if (st.mode < 0) {
      if (ctx_.thinking) {
        st.mode = 0;
      } else {
        size_t lead = 0;
        while (lead < t.size() && IsSpace(t[lead])) ++lead;
        const std::string_view head = std::string_view(t).substr(lead);
        if (head.substr(0, kThinkOpen.size()) == kThinkOpen) {
          st.mode = 0;
          st.sent = lead + kThinkOpen.size();
        } else if (!finished && kThinkOpen.substr(0, head.size()) == head) {
          continue;  // could still become <think>
        } else {
          st.mode = 1;
        }
      }
    }
    std::string reasoning, content;
    for (bool again = true; again;) {
      again = false;
      if (st.mode == 0) {
        const size_t close = t.find(kThinkClose, st.sent);
        if (close != std::string::npos) {
          reasoning += t.substr(st.sent, close - st.sent);
          st.sent = close + kThinkClose.size();
          st.mode = 1;
          again = true;
          st.strip_lead = true;  // content after </think> starts at a non-space character
        } else {
          size_t end = finished ? t.size() : PartialTagStart(t, kThinkClose);
          end = finished ? end : Utf8Safe(t, std::max(end, st.sent));
          if (end > st.sent) reasoning += t.substr(st.sent, end - st.sent);
          st.sent = std::max(st.sent, end);
        }
      } else if (st.mode == 1) {
        const size_t open = req_.tools_given ? t.find(kToolOpen, st.sent) : std::string::npos;
        size_t end = open != std::string::npos ? open : t.size();
        if (open == std::string::npos && !finished) {
          if (req_.tools_given) end = PartialTagStart(t, kToolOpen);
          // Trailing whitespace waits: before a tool call it is not content.
          while (end > st.sent && IsSpace(t[end - 1])) --end;
          end = Utf8Safe(t, std::max(end, st.sent));
        } else if (open != std::string::npos) {
          while (end > st.sent && IsSpace(t[end - 1])) --end;
        }
        if (st.strip_lead) {
          while (st.sent < end && IsSpace(t[st.sent])) ++st.sent;
          if (st.sent < end) st.strip_lead = false;
        }
        if (end > st.sent) {
          content += t.substr(st.sent, end - st.sent);
          st.sent = end;
        }
        if (open != std::string::npos) {
          st.mode = 2;
          st.withheld = st.sent;
          st.sent = open;
        }
      }
    }
    if (!reasoning.empty())
      events +=
          Chunk(c, "reasoning_content", reasoning, take_logprobs() + ",\"finish_reason\":null");
    if (!content.empty()) {
      events += Chunk(c, "content", content, take_logprobs() + ",\"finish_reason\":null");
    }
    if (!finished) continue;
    // The end of the choice: tool calls, then the finish chunk.
    std::string finish = o.finish_reason;
    if (st.mode == 2) {
      std::string before;
      const auto calls =
          ParseToolCalls(std::string_view(t).substr(st.sent),
                         "call_" + ctx_.id.substr(std::min<size_t>(ctx_.id.size(), 9)) + "_" +
                             std::to_string(c) + "_",
                         &before);
      if (!calls.empty()) {
        JsonWriter w;
        w.BeginObject();
        WriteHead(w, ctx_, "chat.completion.chunk");
        w.Key("choices");
        w.BeginArray();
        w.BeginObject();
        w.KeyInt("index", static_cast<int64_t>(c));
        w.Key("delta");
        w.BeginObject();
        WriteToolCalls(w, calls, true);
        w.EndObject();
        w.Key("logprobs");
        w.Null();
        w.Key("finish_reason");
        w.Null();
        w.EndObject();
        w.EndArray();
        w.EndObject();
        events += "data: " + w.Take() + "\n\n";
        finish = "tool_calls";
      } else {
        // Not a well-formed call: it was content after all (with the whitespace before it).
        events +=
            Chunk(c, "content", t.substr(st.withheld), ",\"logprobs\":null,\"finish_reason\":null");
      }
    }
    std::string stop = "null";
    if (o.stop_token) {
      stop = std::to_string(*o.stop_token);
    } else if (o.stop_string) {
      JsonWriter sw;
      sw.String(*o.stop_string);
      stop = sw.Take();
    }
    events +=
        Chunk(c, "", "",
              take_logprobs() + ",\"finish_reason\":\"" + finish + "\",\"stop_reason\":" + stop);
    st.finished = true;
  }
  return events;
}

std::string ChatStream::Finish(const GenerateRequest& r) {
  std::string events;
  if (req_.include_usage) {
    JsonWriter w;
    w.BeginObject();
    WriteHead(w, ctx_, "chat.completion.chunk");
    w.Key("choices");
    w.BeginArray();
    w.EndArray();
    WriteUsage(w, r);
    w.EndObject();
    events += "data: " + w.Take() + "\n\n";
  }
  return events + "data: [DONE]\n\n";
}

}  // namespace sluice::io
