// `sluice chat-template --model DIR --messages FILE [--chat-template FILE]`: prints what the
// model will see for a conversation: the chat template (the serve rules: --chat-template,
// DIR/chat_template.jinja, tokenizer_config.json) rendered over the messages, with the
// template fields of a chat request (tools, tool_choice, add_generation_prompt,
// continue_final_message, chat_template, chat_template_kwargs). FILE holds a JSON object
// with those fields, or just the list of messages.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "chat/template.h"
#include "cli/command.h"
#include "cli/common.h"
#include "cli/serve_generate.h"
#include "io/chat.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct ChatTemplateFlags {
  std::string model, messages, chat_template;
};

int RunChatTemplate(const ChatTemplateFlags& f) {
  std::ifstream in(f.messages, std::ios::binary);
  if (!in) return ReportError(NotFound("cannot read " + f.messages));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string body = ss.str();
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && body[first] == '[') body = "{\"messages\": " + body + "}";
  auto bundle = LoadModelBundle(f.model);
  if (!bundle.ok()) return ReportError(bundle.status());
  const ModelBundle& b = **bundle;
  std::string source;
  auto model_tmpl = ResolveChatTemplate(b, f.chat_template, &source);
  if (!model_tmpl.ok()) return ReportError(model_tmpl.status());
  auto obj = io::ParseObject(body);
  if (!obj.ok()) return ReportError(obj.status().WithContext(f.messages));
  io::Fields fields(*obj, "");
  io::ChatTokens toks;
  if (b.tokenizer) {
    toks.bos = b.tokenizer->config().bos_token.value_or("");
    toks.eos = b.tokenizer->config().eos_token.value_or("");
  }
  io::ChatRequest req;
  Status st = io::ReadChatTemplateFields(fields, toks, &req);
  if (st.ok()) st = fields.CheckNoUnknown();
  if (!st.ok()) return ReportError(st.WithContext(f.messages));
  const std::string& text = req.chat_template ? *req.chat_template : *model_tmpl;
  if (text.empty()) {
    return ReportError(FailedPrecondition(
        "no chat template: " + f.model +
        " has none (chat_template.jinja, tokenizer_config.json); give --chat-template FILE"));
  }
  auto tmpl = chat::Template::Parse(text);
  if (!tmpl.ok()) return ReportError(tmpl.status().WithContext("chat template"));
  auto ctx = chat::ParseJson(req.context_json);
  if (!ctx.ok()) return ReportError(ctx.status());
  auto out = tmpl->Render(*ctx);
  if (!out.ok()) return ReportError(out.status().WithContext("chat template"));
  std::fwrite(out->data(), 1, out->size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

Registrar chat_template_cmd(Command{
    "chat-template", "Render a conversation through a model's chat template (what it will see)",
    [](CLI::App* sub) {
      auto f = std::make_shared<ChatTemplateFlags>();
      sub->add_option("--model", f->model, "model directory")->required();
      sub->add_option("--messages", f->messages,
                      "JSON file: a list of messages, or an object with messages, tools, "
                      "tool_choice, add_generation_prompt, continue_final_message, "
                      "chat_template, chat_template_kwargs")
          ->required();
      sub->add_option("--chat-template", f->chat_template,
                      "template file (default: the model directory's chat_template.jinja, "
                      "else tokenizer_config.json's chat_template)");
      return std::function<int()>([f] { return RunChatTemplate(*f); });
    }});

}  // namespace
}  // namespace sluice::cli
