#include "io/plugin_io.h"

#include <algorithm>
#include <cstring>

#include "io/inputs.h"
#include "io/json.h"
#include "io/registry.h"

namespace sluice::io {
namespace {

std::string Message(const sluice_plugin_error& e) {
  std::string m(e.message, strnlen(e.message, sizeof e.message));
  return m.empty() ? "(no message)" : m;
}

int Fail(sluice_plugin_error* err, const std::string& m) {
  return sluice_plugin_fail(err, "%s", m.c_str());
}

// For the add_* functions: -1 with the message in err.
int32_t Refuse(sluice_plugin_error* err, const std::string& m) {
  Fail(err, m);
  return -1;
}

// One request of a plugin processor: everything it allocated lives here.
struct PluginIoState final : IoState {
  enum class Phase { kParse, kBetween, kRespond };

  ~PluginIoState() override {
    for (auto it = cleanups.rbegin(); it != cleanups.rend(); ++it) it->first(it->second);
  }

  sluice_io_call call{};
  const ModelContext* model = nullptr;
  Phase phase = Phase::kParse;
  std::vector<TokenSequence> seqs;
  std::vector<PluginClipInput> clip_inputs;  // a CLIP model's inputs (instead of seqs)
  std::string route;                         // call.route
  std::string out;
  std::string misuse;  // a call outside its phase (the request fails with 500)
  size_t allocated = 0;
  std::vector<std::unique_ptr<std::max_align_t[]>> blocks;
  std::vector<std::pair<void (*)(void*), void*>> cleanups;
};

PluginIoState& StateOf(sluice_io_call* call) { return *static_cast<PluginIoState*>(call->context); }

void* Alloc(sluice_io_call* call, size_t size, void (*cleanup)(void*)) {
  PluginIoState& s = StateOf(call);
  const size_t words = (size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  const size_t bytes = std::max<size_t>(words, 1) * sizeof(std::max_align_t);
  if (size > kPluginRequestMemory || s.allocated + bytes > kPluginRequestMemory) return nullptr;
  s.blocks.emplace_back(new std::max_align_t[std::max<size_t>(words, 1)]());
  s.allocated += bytes;
  void* p = s.blocks.back().get();
  if (cleanup != nullptr) s.cleanups.emplace_back(cleanup, p);
  return p;
}

size_t Count(const PluginIoState& s) { return s.seqs.size() + s.clip_inputs.size(); }

// The sequence's index, or -1 with err. On a CLIP model the sequence is a text's input.
int32_t AddSequence(PluginIoState& s, StatusOr<TokenSequence> seq, const std::string& path,
                    sluice_plugin_error* err) {
  if (!seq.ok()) return Refuse(err, seq.status().message());
  s.prompt_tokens += static_cast<int64_t>(seq->ids.size());
  if (s.model->clip) {
    PluginClipInput in;
    in.ids = std::move(seq->ids);
    in.path = path;
    s.clip_inputs.push_back(std::move(in));
  } else {
    s.seqs.push_back(std::move(seq).value());
  }
  return static_cast<int32_t>(Count(s) - 1);
}

// A CLIP model without a text tower takes no texts (empty when it has one).
std::string NoTextTower(const PluginIoState& s, const std::string& path) {
  if (!s.model->clip || s.model->clip_text) return "";
  return path + ": a text, but CLIP model \"" + s.model->name + "\" has no text tower";
}

// Whether another sequence may be added (else err says why).
bool CanAdd(PluginIoState& s, const char* fn, sluice_plugin_error* err) {
  if (s.phase != PluginIoState::Phase::kParse) {
    Fail(err, std::string(fn) + " is only allowed in parse");
    if (s.misuse.empty()) s.misuse = std::string(fn) + " called outside parse";
    return false;
  }
  const int max = s.model->max_inputs_per_request;
  if (max > 0 && Count(s) >= static_cast<size_t>(max)) {
    Fail(err, "more than " + std::to_string(max) +
                  " sequences in one request (--max-inputs-per-request)");
    return false;
  }
  return true;
}

std::string SeqPath(const PluginIoState& s) { return "sequence[" + std::to_string(Count(s)) + "]"; }

int32_t AddTokens(sluice_io_call* call, const int32_t* ids, int64_t n, const int32_t* type_ids,
                  sluice_plugin_error* err) {
  PluginIoState& s = StateOf(call);
  if (!CanAdd(s, "add_tokens", err)) return -1;
  const std::string path = SeqPath(s);
  if (n < 1 || ids == nullptr) return Refuse(err, path + ": no token ids");
  if (std::string m = NoTextTower(s, path); !m.empty()) return Refuse(err, m);
  Item item;
  item.is_ids = true;
  item.ids.assign(ids, ids + n);
  auto seq = EncodeOne(*s.model, item, Truncate{}, path);
  if (seq.ok() && type_ids != nullptr) {
    std::vector<int32_t> types(type_ids, type_ids + seq->ids.size());
    bool nonzero = false;
    for (int32_t t : types) nonzero |= t != 0;
    if (nonzero && !s.model->uses_token_types) {
      return Refuse(err, path + ": type ids given, but this model has no token types");
    }
    if (nonzero) seq->type_ids = std::move(types);
  }
  return AddSequence(s, std::move(seq), path, err);
}

int32_t AddText(sluice_io_call* call, const char* a, size_t a_len, const char* b, size_t b_len,
                int32_t truncate, sluice_plugin_error* err) {
  PluginIoState& s = StateOf(call);
  if (!CanAdd(s, "add_text", err)) return -1;
  const std::string path = SeqPath(s);
  if (std::string m = NoTextTower(s, path); !m.empty()) return Refuse(err, m);
  if (s.model->clip && b != nullptr) {
    return Refuse(err, path +
                           ": a text pair, but a CLIP model embeds one text at a time (add the "
                           "texts on their own and compare their embeddings)");
  }
  if (s.model->tokenizer == nullptr) {
    return Refuse(err, path + ": this model has no tokenizer.json; add token ids");
  }
  if (a == nullptr && a_len > 0) return Refuse(err, path + ": NULL text");
  if (truncate < -1) return Refuse(err, path + ": truncate must be -1, 0 or positive");
  Item ia;
  ia.text.assign(a != nullptr ? a : "", a_len);
  const Truncate t{truncate};
  if (b == nullptr) {
    if (ia.text.empty()) return Refuse(err, path + ": an empty text");
    return AddSequence(s, EncodeOne(*s.model, ia, t, path), path, err);
  }
  Item ib;
  ib.text.assign(b, b_len);
  return AddSequence(s, EncodePair(*s.model, ia, ib, t, path), path, err);
}

int32_t AddImage(sluice_io_call* call, const char* source, size_t len, sluice_plugin_error* err) {
  PluginIoState& s = StateOf(call);
  if (!CanAdd(s, "add_image", err)) return -1;
  const std::string path = SeqPath(s);
  if (!s.model->clip) {
    return Refuse(err, path + ": add_image needs a CLIP model (SLUICE_TASK_CLIP); model \"" +
                           s.model->name + "\" is served with task " + s.model->task);
  }
  if (!s.model->clip_vision) {
    return Refuse(
        err, path + ": an image, but CLIP model \"" + s.model->name + "\" has no vision tower");
  }
  if (source == nullptr || len == 0) return Refuse(err, path + ": an empty image source");
  PluginClipInput in;
  in.image = true;
  in.source.assign(source, len);
  in.path = path;
  s.clip_inputs.push_back(std::move(in));
  return static_cast<int32_t>(Count(s) - 1);
}

bool CanWrite(PluginIoState& s, const char* fn) {
  if (s.phase == PluginIoState::Phase::kRespond) return true;
  if (s.misuse.empty()) s.misuse = std::string(fn) + " called outside respond";
  return false;
}

void Write(sluice_io_call* call, const char* data, size_t len) {
  PluginIoState& s = StateOf(call);
  if (CanWrite(s, "write") && len > 0 && data != nullptr) s.out.append(data, len);
}

void WriteString(sluice_io_call* call, const char* str, size_t len) {
  PluginIoState& s = StateOf(call);
  if (!CanWrite(s, "write_string")) return;
  AppendEscaped(&s.out, std::string_view(str != nullptr ? str : "", str != nullptr ? len : 0));
}

void WriteFloat(sluice_io_call* call, float v) {
  PluginIoState& s = StateOf(call);
  if (!CanWrite(s, "write_float")) return;
  JsonWriter w;
  w.Float(v);
  s.out += w.str();
}

bool IsPooling(std::string_view route) { return route == "/pooling"; }

}  // namespace

PluginIoProcessor::PluginIoProcessor(const IoProcessorEntry& entry, const ModelContext& m)
    : entry_(entry),
      model_name_(m.name),
      model_task_(m.task),
      model_dir_(m.model_dir),
      labels_(m.labels) {
  while (model_dir_.size() > 1 && model_dir_.back() == '/') model_dir_.pop_back();
  entry_.desc.name = entry_.name.c_str();
  for (const std::string& l : labels_) label_ptrs_.push_back(l.c_str());
  info_.struct_size = sizeof info_;
  info_.name = model_name_.c_str();
  info_.task = model_task_.c_str();
  info_.output_dim = m.output_dim;
  info_.has_tokenizer = m.tokenizer != nullptr ? 1 : 0;
  info_.max_inputs = m.max_inputs_per_request;
  info_.max_tokens = m.max_tokens_per_input;
  info_.num_labels = static_cast<int32_t>(label_ptrs_.size());
  info_.labels = label_ptrs_.empty() ? nullptr : label_ptrs_.data();
  info_.model_dir = model_dir_.c_str();
}

std::vector<PluginClipInput> PluginIoProcessor::TakeClipInputs(IoState& state) {
  auto& st = static_cast<PluginIoState&>(state);
  std::vector<PluginClipInput> out = std::move(st.clip_inputs);
  st.clip_inputs.clear();
  return out;
}

Status PluginIoProcessor::FromPlugin(int rc, const sluice_plugin_error& err, bool in_parse) const {
  const std::string m = entry_.name + ": " + Message(err);
  switch (rc) {
    case 400:
      return InvalidArgument(m);
    case 404:
      return Status(StatusCode::kNotFound, m);
    case 429:
      return Status(StatusCode::kResourceExhausted, m);
    case 500:
      return Internal(m);
    case 503:
      return Status(StatusCode::kUnavailable, m);
    default:
      return in_parse ? InvalidArgument(m) : Internal(m);
  }
}

StatusOr<std::unique_ptr<IoState>> PluginIoProcessor::Parse(const IoRequest& req) const {
  const ModelContext& m = *req.model;
  // On /pooling the server passes the envelope's "data" as the body (io/registry.h).
  const std::string_view body = req.body;
  auto st = std::make_unique<PluginIoState>();
  st->model = &m;
  sluice_io_call& c = st->call;
  c.struct_size = sizeof c;
  c.model = &info_;
  c.processor = entry_.name.c_str();
  st->route = IsPooling(req.route) ? "/pooling" : "/plugins/" + entry_.name;
  c.route = st->route.c_str();
  c.context = st.get();
  c.alloc = Alloc;
  c.add_tokens = AddTokens;
  c.add_text = AddText;
  c.write = Write;
  c.write_string = WriteString;
  c.write_float = WriteFloat;
  c.add_image = AddImage;
  sluice_plugin_error err{};
  const int rc = entry_.desc.parse(entry_.desc.user_data, &c, body.data(), body.size(), &err);
  st->phase = PluginIoState::Phase::kBetween;
  if (rc != 0) return FromPlugin(rc, err, /*in_parse=*/true);
  if (!st->misuse.empty()) return Internal(entry_.name + ": " + st->misuse);
  return std::unique_ptr<IoState>(std::move(st));
}

Status PluginIoProcessor::PreProcess(const ModelContext&, IoState& state,
                                     std::vector<TokenSequence>* sequences) const {
  auto& st = static_cast<PluginIoState&>(state);
  *sequences = std::move(st.seqs);
  st.seqs.clear();
  return Status::Ok();
}

StatusOr<IoResponse> PluginIoProcessor::PostProcess(const ModelContext&, IoState& state,
                                                    std::vector<PooledOutput>& outs) const {
  auto& st = static_cast<PluginIoState&>(state);
  std::vector<sluice_io_output> views(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const PooledOutput& o = outs[i];
    sluice_io_output& v = views[i];
    v.rows = std::max(1, o.rows);
    v.dim = static_cast<int32_t>(o.values.size() / static_cast<size_t>(v.rows));
    v.values = o.values.data();
    v.raw = o.raw.size() == o.values.size() && !o.raw.empty() ? o.raw.data() : nullptr;
    v.token_indices =
        o.token_indices.size() == static_cast<size_t>(v.rows) && !o.token_indices.empty()
            ? o.token_indices.data()
            : nullptr;
  }
  st.phase = PluginIoState::Phase::kRespond;
  sluice_plugin_error err{};
  const int rc = entry_.desc.respond(entry_.desc.user_data, &st.call, views.data(),
                                     static_cast<int32_t>(views.size()), &err);
  st.phase = PluginIoState::Phase::kBetween;
  if (rc != 0) return FromPlugin(rc, err, /*in_parse=*/false);
  if (!st.misuse.empty()) return Internal(entry_.name + ": " + st.misuse);
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto e = parser.parse(st.out).get(doc); e != simdjson::SUCCESS) {
    return Internal(entry_.name + ": the plugin's response is not JSON (" +
                    simdjson::error_message(e) + ")");
  }
  return IoResponse{std::move(st.out)};
}

StatusOr<std::vector<std::shared_ptr<const PluginIoProcessor>>> BindPluginIoProcessors(
    const PluginSet& set, const ModelContext& model) {
  std::vector<std::shared_ptr<const PluginIoProcessor>> out;
  for (const auto& e : set.io_processors()) {
    const std::string task = IoTaskName(e->desc.task);
    const std::string where = "plugin " + e->origin + ": IO processor " + e->name;
    RETURN_IF_ERROR(ProcessorRegistry::CheckNotBuiltin(e->name, where));
    if (task != model.task) {
      return FailedPrecondition(where + " needs a model with task " + task + "; model \"" +
                                model.name + "\" is served with task " + model.task);
    }
    auto p = std::make_shared<PluginIoProcessor>(*e, model);
    if (e->desc.check_model != nullptr) {
      sluice_plugin_error err{};
      if (e->desc.check_model(e->desc.user_data, &p->model_info(), &err) != 0) {
        return FailedPrecondition(where + " refused model \"" + model.name + "\": " + Message(err));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace sluice::io
