// OpenAI /v1/chat/completions: the request reader (messages, tools and every sampling field
// reach the template or the engine, or are refused by name), the template context, the
// parsing of the model's output into reasoning_content / content / tool_calls (Qwen3-style
// <think>...</think> and Hermes/Qwen <tool_call>{json}</tool_call>), and the response
// writers (one JSON body, or server-sent-event chunks).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generator.h"
#include "io/json.h"
#include "sluice/status.h"
#include "structured/tool_calls.h"

namespace sluice::io {

struct ChatRequest {
  std::string model;
  // The template context as JSON: {"messages": [...], "tools": [...] (when given and
  // tool_choice is not "none"), "add_generation_prompt": b, "continue_final_message": b,
  // "bos_token": s, "eos_token": s, ...chat_template_kwargs}. Messages are normalised:
  // content parts joined into one string, tool-call arguments parsed into objects (as
  // vLLM hands them to templates).
  std::string context_json;
  std::optional<std::string> chat_template;  // per request, instead of the model's
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool tools_given = false;
  // tool_choice "required" / a named function, or strict tools under "auto": the tool-call
  // constraint (set as params.constraint by ToolCallConstraint once the prompt is rendered).
  std::optional<structured::ToolCallSpec> tool_calls;
  std::string tool_calls_field;  // "tool_choice" or "tools (strict)" (errors name it)
  SamplingParams params;
  bool stream = false, include_usage = false;
  std::string user;
};

struct ChatTokens {
  std::string bos, eos;  // the tokenizer's bos/eos token text ("" when none)
};

StatusOr<ChatRequest> ParseChatRequest(std::string_view body, const ChatTokens& tokens);
// Only what the template needs (messages, tools, tool_choice, parallel_tool_calls,
// add_generation_prompt, continue_final_message, chat_template, chat_template_kwargs):
// shared with /tokenize's messages form.
Status ReadChatTemplateFields(Fields& f, const ChatTokens& tokens, ChatRequest* out);

// The tool-call constraint of a request (ChatRequest::tool_calls), for a prompt that leaves a
// <think> block open (`thinking`) or not; nullopt when the request has none.
std::optional<structured::ConstraintSpec> ToolCallConstraint(const ChatRequest& req, bool thinking);

// The model's output split as vLLM's qwen3 reasoning parser and hermes tool parser do.
struct ParsedToolCall {
  std::string id, name, arguments;  // arguments: a JSON string
};
struct ParsedChatOutput {
  std::optional<std::string> reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};
// `thinking`: the output starts inside a reasoning block (the rendered prompt ended with an
// open <think>); otherwise reasoning only when the output itself starts with <think>.
ParsedChatOutput ParseChatOutput(const std::string& text, bool thinking, bool tools,
                                 const std::string& id_prefix);

// Whether a rendered prompt leaves a <think> block open (the model continues reasoning).
bool PromptOpensThinking(std::string_view prompt);

struct ChatContext {
  std::string id;  // "chatcmpl-..."
  int64_t created = 0;
  std::string model, system_fingerprint;
  const Tokenizer* tokenizer = nullptr;
  bool thinking = false;  // PromptOpensThinking of the rendered prompt
};

std::string ChatResponse(const ChatContext& ctx, const ChatRequest& req,
                         const GenerateRequest& result);

// Streaming: role first, then reasoning_content / content deltas (text that may belong to
// a <think>, </think> or <tool_call> tag held back until it is known), tool calls parsed at
// the end of a choice, the finish chunk, usage when asked, [DONE].
class ChatStream {
 public:
  ChatStream(const ChatContext& ctx, const ChatRequest& req);
  std::string Update(const GenerateRequest& r);
  std::string Finish(const GenerateRequest& r);

 private:
  struct Choice {
    size_t sent = 0;  // bytes of the output text consumed
    int mode = -1;    // -1 undecided, 0 reasoning, 1 content, 2 inside tool calls
    size_t tokens_sent = 0;
    size_t withheld = 0;      // content bytes from here were held back before a tool call
    bool strip_lead = false;  // content after </think> starts at a non-space character
    bool role_sent = false, finished = false;
  };
  std::string Chunk(size_t index, const std::string& field, const std::string& value,
                    const std::string& extra_json);
  ChatContext ctx_;
  const ChatRequest& req_;
  std::vector<Choice> choices_;
};

}  // namespace sluice::io
