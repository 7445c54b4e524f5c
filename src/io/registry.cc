#include "io/registry.h"

#include "io/builtins.h"
#include "io/inputs.h"
#include "io/json.h"

namespace sluice::io {
namespace {

ProcessorEntry Builtin(std::unique_ptr<IoProcessor> p, std::vector<std::string> routes) {
  ProcessorEntry e;
  e.processor = std::move(p);
  e.origin = "built-in";
  e.routes = std::move(routes);
  e.builtin = true;
  return e;
}

// Built once; the processors are const and stateless, shared by every registry.
const std::vector<ProcessorEntry>& Builtins() {
  static const std::vector<ProcessorEntry>* builtins = [] {
    auto* v = new std::vector<ProcessorEntry>();
    v->push_back(Builtin(MakeEmbedProcessor(EmbedFlavor::kOpenAI), {"/v1/embeddings"}));
    v->push_back(Builtin(MakeEmbedProcessor(EmbedFlavor::kTei), {"/embed"}));
    v->push_back(Builtin(MakeEmbedProcessor(EmbedFlavor::kPooling), {"/pooling"}));
    v->push_back(Builtin(MakeClassifyProcessor(ClassifyFlavor::kVllm), {"/classify"}));
    v->push_back(Builtin(MakeClassifyProcessor(ClassifyFlavor::kTei), {"/predict"}));
    v->push_back(Builtin(MakeScoreProcessor(ScoreFlavor::kScore), {"/score", "/v1/score"}));
    v->push_back(Builtin(MakeScoreProcessor(ScoreFlavor::kRerank), {"/v1/rerank", "/rerank"}));
    v->push_back(Builtin(MakeScoreProcessor(ScoreFlavor::kCohereV2), {"/v2/rerank"}));
    v->push_back(Builtin(MakeTokenClassifyProcessor(), {"/token-classify"}));
    v->push_back(Builtin(MakeAbsaProcessor(), {"/absa"}));
    v->push_back(Builtin(MakeTokenizeProcessor(false), {"/tokenize"}));
    v->push_back(Builtin(MakeTokenizeProcessor(true), {"/detokenize"}));
    return v;
  }();
  return *builtins;
}

}  // namespace

ProcessorRegistry::ProcessorRegistry() : entries_(Builtins()) {}

Status ProcessorRegistry::AddPlugin(std::shared_ptr<const IoProcessor> processor,
                                    const std::string& origin) {
  const std::string name(processor->name());
  const std::string where = "plugin " + origin + ": IO processor " + name;
  RETURN_IF_ERROR(CheckNotBuiltin(name, where));
  if (const ProcessorEntry* e = FindEntry(name)) {
    return FailedPrecondition(where + " is already registered by " + e->origin);
  }
  ProcessorEntry e;
  e.processor = std::move(processor);
  e.origin = origin;
  entries_.push_back(std::move(e));
  return Status::Ok();
}

const IoProcessor* ProcessorRegistry::FindRoute(std::string_view route) const {
  for (const ProcessorEntry& e : entries_) {
    for (const std::string& r : e.routes) {
      if (r == route) return e.processor.get();
    }
  }
  return nullptr;
}

const ProcessorEntry* ProcessorRegistry::FindEntry(std::string_view name) const {
  for (const ProcessorEntry& e : entries_) {
    if (e.processor->name() == name) return &e;
  }
  return nullptr;
}

const IoProcessor* ProcessorRegistry::Find(std::string_view name) const {
  const ProcessorEntry* e = FindEntry(name);
  return e != nullptr ? e->processor.get() : nullptr;
}

std::string ProcessorRegistry::PluginNames() const {
  std::string s;
  for (const ProcessorEntry& e : entries_) {
    if (!e.builtin) s += (s.empty() ? "" : ", ") + std::string(e.processor->name());
  }
  return s.empty() ? "none" : s;
}

std::string ProcessorRegistry::BuiltinNames() {
  std::string s;
  for (const ProcessorEntry& e : Builtins()) {
    s += (s.empty() ? "" : ", ") + std::string(e.processor->name());
  }
  return s;
}

bool ProcessorRegistry::IsBuiltinName(std::string_view name) {
  for (const ProcessorEntry& e : Builtins()) {
    if (e.processor->name() == name) return true;
  }
  return false;
}

Status ProcessorRegistry::CheckNotBuiltin(std::string_view name, const std::string& where) {
  if (!IsBuiltinName(name)) return Status::Ok();
  return FailedPrecondition(where + ": the name is reserved by a built-in IO processor (" +
                            BuiltinNames() + ")");
}

StatusOr<std::string> PoolingIoData(const ModelContext& m, std::string_view body) {
  ASSIGN_OR_RETURN(simdjson::dom::object obj, ParseObject(body));
  Fields f(obj, "");
  std::string model, name;
  RETURN_IF_ERROR(f.GetString("model", &model));
  RETURN_IF_ERROR(f.GetString("io_processor", &name));
  simdjson::dom::element e;
  if (!f.Get("data", &e)) return FieldError("data", "is required (the IO processor's input)");
  RETURN_IF_ERROR(f.CheckNoUnknown());
  RETURN_IF_ERROR(CheckModelName(m, model));
  return simdjson::to_string(e);
}

std::string PoolingIoResponse(const ModelContext& m, std::string_view name,
                              std::string_view response, int64_t prompt_tokens) {
  JsonWriter w;
  w.BeginObject();
  w.KeyString("id", NewResponseId("pool"));
  w.KeyString("object", "io_processor");
  w.KeyInt("created", UnixSeconds());
  w.KeyString("model", m.name);
  w.KeyString("io_processor", name);
  w.Key("data");
  w.Raw(response);
  w.Key("usage");
  w.BeginObject();
  w.KeyInt("prompt_tokens", prompt_tokens);
  w.KeyInt("total_tokens", prompt_tokens);
  w.EndObject();
  w.EndObject();
  return w.Take();
}

}  // namespace sluice::io
