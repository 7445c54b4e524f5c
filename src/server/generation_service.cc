#include "server/generation_service.h"

#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "core/log.h"
#include "io/builtins.h"
#include "io/chat.h"
#include "io/completions.h"
#include "io/json.h"
#include "server/auth.h"
#include "server/errors.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

double Seconds(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

const std::vector<double> kLatency = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                      0.75,  1,     2.5,  5,    7.5,  10,   20,   40,  80};
const std::vector<double> kTokenLatency = {0.001, 0.0025, 0.005, 0.0075, 0.01,  0.015, 0.02,
                                           0.025, 0.03,   0.04,  0.05,   0.075, 0.1,   0.15,
                                           0.2,   0.3,    0.4,   0.5,    0.75,  1,     2.5};
const std::vector<double> kLengths = {1,   2,    5,    10,   20,    50,    100,   200,
                                      500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

bool IsScoringRoute(const std::string& p) {
  static const char* kRoutes[] = {"/v1/rerank", "/rerank",    "/v2/rerank",   "/score",
                                  "/v1/score",  "/classify",  "/v1/classify", "/v1/embeddings",
                                  "/embed",     "/embed_all", "/pooling",     "/predict"};
  for (const char* r : kRoutes) {
    if (p == r) return true;
  }
  return false;
}

std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

struct GenerationService::GenMetrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, uint64_t> responses;
  std::map<std::string, uint64_t> finished;  // by finish reason
  Histogram ttft{kLatency}, itl{kTokenLatency}, e2e{kLatency}, queue{kLatency}, prefill{kLatency},
      decode{kLatency}, prompt_len{kLengths}, gen_len{kLengths};
  std::atomic<uint64_t> cancelled{0};
};

struct GenerationService::Call {
  HttpRequest req;
  std::shared_ptr<Exchange> ex;
  std::string route;
  io::CompletionRequest creq;
  io::CompletionContext ctx;
  std::vector<std::shared_ptr<GenerateRequest>> reqs;
  std::unique_ptr<io::CompletionStream> stream;
  // /v1/chat/completions: the chat request (creq then holds its one prompt and params).
  std::unique_ptr<io::ChatRequest> chat;
  io::ChatContext chat_ctx;
  std::unique_ptr<io::ChatStream> chat_stream;
  std::mutex mu;  // the fields below, and the stream's writes
  size_t remaining = 0;
  Status failed;
  bool counted = false, responded = false;

  // Streaming: the engine's thread copies what each step added (Delta) into `mirror` through
  // a per-call queue that one worker at a time drains in order, so that formatting and
  // writing events never run on the engine's thread.
  std::vector<std::unique_ptr<GenerateRequest>> mirror;         // per prompt: outputs so far
  std::vector<std::vector<size_t>> copied_text, copied_tokens;  // engine side, per choice
  std::vector<size_t> copied_prompt_lps;
  std::mutex qmu;
  std::deque<std::function<void()>> queue;
  bool draining = false;
};

namespace {

// What one step added to a request's outputs (copied on the engine's thread).
struct OutDelta {
  bool reset = false;  // the text shrank (a stop string was cut): `text` is all of it
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::string finish_reason;
  std::optional<int32_t> stop_token;
  std::optional<std::string> stop_string;
};

}  // namespace

GenerationService::GenerationService(GenerationServiceOptions options, GenerationLoop* loop,
                                     const Tokenizer* tokenizer)
    : options_(std::move(options)),
      loop_(loop),
      tokenizer_(tokenizer),
      metrics_(std::make_unique<GenMetrics>()) {
  pool_ = std::make_unique<WorkerPool>(options_.workers);
}

GenerationService::~GenerationService() { pool_.reset(); }

void GenerationService::Respond(const std::shared_ptr<Call>& call, HttpResponse r) {
  const int status = call->ex->disconnected() ? 499 : r.status;
  {
    std::lock_guard<std::mutex> lock(metrics_->mu);
    ++metrics_->responses[{call->route, status}];
  }
  if (call->counted) {
    call->counted = false;
    in_flight_--;
  }
  call->ex->Respond(std::move(r));
}

void GenerationService::Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) {
  auto call = std::make_shared<Call>();
  call->ex = std::move(ex);
  call->req = std::move(req);
  const HttpRequest& r = call->req;
  const std::string& p = r.path;
  const bool health =
      p == "/health" || p == "/ready" || p == "/v2/health/live" || p == "/v2/health/ready" ||
      (p.rfind("/v2/models/", 0) == 0 && p.size() > 17 && p.substr(p.size() - 6) == "/ready");
  const bool get_route = health || p == "/v1/models" || p == "/metrics";
  const bool post_route = p == "/v1/completions" || p == "/v1/chat/completions" ||
                          p == "/tokenize" || p == "/detokenize";
  call->route = get_route || post_route ? p : IsScoringRoute(p) ? p : "other";
  if (p.rfind("/v2/models/", 0) == 0) call->route = "/v2/models/{name}/ready";
  if (r.transport_error) {
    HttpResponse e = ErrorResponse(r.transport_error, r.transport_message);
    e.close = true;
    return Respond(call, std::move(e));
  }
  if (IsScoringRoute(p)) {
    return Respond(call, ErrorResponse(400, "model \"" + options_.served_name +
                                                "\" is a generation model (task generate): " + p +
                                                " needs a scoring model; use /v1/completions"));
  }
  if (!get_route && !post_route) {
    return Respond(call, ErrorResponse(404, "no route " + r.method + " " + p));
  }
  const char* want = post_route ? "POST" : "GET";
  if (r.method != want) {
    HttpResponse e = ErrorResponse(
        405, "method " + r.method + " is not allowed on " + p + " (use " + want + ")");
    e.headers.emplace_back("Allow", want);
    return Respond(call, std::move(e));
  }
  if (r.overflow && !health) {
    // Over --max-connections: health still answers; anything else is turned away.
    HttpResponse e = ErrorResponse(503, "too many connections (--max-connections); retry later");
    e.headers.emplace_back("Retry-After", "1");
    e.close = true;
    return Respond(call, std::move(e));
  }
  if (!health && (p != "/metrics" || options_.metrics_require_key) && !options_.api_key.empty() &&
      !BearerMatches(r.authorization, options_.api_key)) {
    HttpResponse e = ErrorResponse(401, "missing or wrong API key (Authorization: Bearer KEY)");
    e.headers.emplace_back("WWW-Authenticate", "Bearer");
    return Respond(call, std::move(e));
  }
  if (health) {
    if (p.rfind("/v2/models/", 0) == 0) {
      const std::string name = p.substr(11, p.size() - 11 - 6);
      if (name != options_.served_name) {
        return Respond(call, ErrorResponse(404, "model \"" + name + "\" is not served here"));
      }
    }
    const bool check = p != "/health" && p != "/v2/health/live";
    if (check && (!ready_ || draining_)) {
      return Respond(call, ErrorResponse(503, draining_ ? "the server is shutting down"
                                                        : "the model is loading"));
    }
    HttpResponse ok;
    ok.body = "{}";
    return Respond(call, std::move(ok));
  }
  if (p == "/v1/models") {
    io::JsonWriter w;
    w.BeginObject();
    w.KeyString("object", "list");
    w.Key("data");
    w.BeginArray();
    w.BeginObject();
    w.KeyString("id", options_.served_name);
    w.KeyString("object", "model");
    w.KeyInt("created", io::UnixSeconds());
    w.KeyString("owned_by", "sluice");
    w.KeyString("task", "generate");
    w.KeyInt("max_model_len", loop_->limits().max_model_len);
    w.EndObject();
    w.EndArray();
    w.EndObject();
    HttpResponse m;
    m.body = w.Take();
    return Respond(call, std::move(m));
  }
  if (p == "/metrics") {
    HttpResponse m;
    m.body = RenderMetrics();
    m.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return Respond(call, std::move(m));
  }
  if (draining_) return Respond(call, ErrorResponse(503, "the server is shutting down"));
  if (!ready_) return Respond(call, ErrorResponse(503, "the model is loading"));
  call->counted = true;
  in_flight_++;
  if (p == "/tokenize" || p == "/detokenize") {
    return pool_->Post([this, call] {
      auto out = Tokenize(call->req.body, call->req.path == "/detokenize");
      if (!out.ok()) return Respond(call, StatusResponse(out.status()));
      HttpResponse ok;
      ok.body = std::move(out).value();
      Respond(call, std::move(ok));
    });
  }
  pool_->Post([this, call] { Complete(call); });
}

void GenerationService::Complete(std::shared_ptr<Call> call) {
  if (call->ex->disconnected()) {
    metrics_->cancelled++;
    return Respond(call, StatusResponse(Status(StatusCode::kUnavailable, "client went away")));
  }
  const bool chat = call->route == "/v1/chat/completions";
  if (chat) {
    if (Status s = PrepareChat(*call); !s.ok()) return Respond(call, StatusResponse(s));
  } else {
    auto parsed = io::ParseCompletionRequest(call->req.body, tokenizer_);
    if (!parsed.ok()) return Respond(call, StatusResponse(parsed.status()));
    call->creq = std::move(parsed).value();
  }
  io::CompletionRequest& cr = call->creq;
  if (!ModelMatches(cr.model)) {
    return Respond(call,
                   ErrorResponse(404, "model \"" + cr.model + "\" is not served here; " +
                                          "this server serves \"" + options_.served_name + "\""));
  }
  if (static_cast<int64_t>(cr.prompts.size()) > options_.max_prompts_per_request) {
    return Respond(call, ErrorResponse(400, "prompt: " + std::to_string(cr.prompts.size()) +
                                                " prompts, over the limit of " +
                                                std::to_string(options_.max_prompts_per_request)));
  }
  // Logits processors are the model's own (docs/plugins.md "Plugins per model"): a name this
  // model does not load is refused naming the model and what it loads.
  const PluginSet* plugins = loop_->generator().options().plugins.get();
  for (const std::string& n : cr.params.logits_processors) {
    if (plugins == nullptr || plugins->Find(n) == nullptr) {
      return Respond(
          call, ErrorResponse(400, "logits_processors: unknown logits processor \"" + n +
                                       "\" on model \"" + options_.served_name + "\" (loaded: " +
                                       (plugins ? plugins->Names() : "none") + ")"));
    }
  }
  for (size_t i = 0; i < cr.prompts.size(); ++i) {
    Status v = ValidateGeneration(cr.params, cr.prompts[i].size(), loop_->limits());
    if (!v.ok()) {
      const std::string where = cr.prompts.size() > 1 ? "prompt[" + std::to_string(i) + "]: " : "";
      return Respond(call, StatusResponse(Status(v.code(), where + v.message())));
    }
  }
  if (cr.params.constraint) {
    // Structured outputs: compiled here (cached per constraint), not on the engine thread.
    auto g = loop_->generator().CompileConstraint(*cr.params.constraint);
    if (!g.ok()) return Respond(call, StatusResponse(g.status()));
    cr.params.grammar = *g;
  }
  char id[32];
  std::snprintf(id, sizeof id, chat ? "chatcmpl-%016llx" : "cmpl-%016llx",
                static_cast<unsigned long long>(next_id_.fetch_add(1) * 0x9E3779B97F4A7C15ull));
  call->ctx.id = id;
  call->ctx.created = io::UnixSeconds();
  call->ctx.model = options_.served_name;
  call->ctx.system_fingerprint = "sluice";
  call->ctx.tokenizer = tokenizer_;
  if (chat) {
    call->chat_ctx.id = call->ctx.id;
    call->chat_ctx.created = call->ctx.created;
    call->chat_ctx.model = call->ctx.model;
    call->chat_ctx.system_fingerprint = call->ctx.system_fingerprint;
    call->chat_ctx.tokenizer = tokenizer_;
  }
  if (!cr.user.empty()) SLUICE_LOG_INFO("{}: user \"{}\"", call->ctx.id, cr.user);
  call->remaining = cr.prompts.size();
  for (size_t p = 0; p < cr.prompts.size(); ++p) {
    auto g = std::make_shared<GenerateRequest>();
    g->id = call->ctx.id + "-" + std::to_string(p);
    g->prompt = std::move(cr.prompts[p]);
    g->params = cr.params;
    if (cr.stream) {
      g->sink.on_output = [this, call, p](GenerateRequest& r) {
        // Engine thread: copy what is new, format and write on a worker.
        std::vector<OutDelta> deltas(r.outputs.size());
        std::vector<size_t>& ct = call->copied_text[p];
        std::vector<size_t>& ck = call->copied_tokens[p];
        for (size_t c = 0; c < r.outputs.size(); ++c) {
          const CompletionOutput& o = r.outputs[c];
          OutDelta& d = deltas[c];
          if (o.text.size() < ct[c]) {
            d.reset = true;
            d.text = o.text;
          } else {
            d.text = o.text.substr(ct[c]);
          }
          ct[c] = o.text.size();
          d.tokens.assign(o.token_ids.begin() + static_cast<std::ptrdiff_t>(ck[c]),
                          o.token_ids.end());
          if (o.logprobs.size() > ck[c]) {
            d.logprobs.assign(o.logprobs.begin() + static_cast<std::ptrdiff_t>(ck[c]),
                              o.logprobs.end());
          }
          ck[c] = o.token_ids.size();
          d.finish_reason = o.finish_reason;
          d.stop_token = o.stop_token;
          d.stop_string = o.stop_string;
        }
        std::vector<TokenLogprobs> plps;
        if (r.prompt_logprobs.size() > call->copied_prompt_lps[p]) {
          plps.assign(
              r.prompt_logprobs.begin() + static_cast<std::ptrdiff_t>(call->copied_prompt_lps[p]),
              r.prompt_logprobs.end());
          call->copied_prompt_lps[p] = r.prompt_logprobs.size();
        }
        Enqueue(call, [call, p, deltas = std::move(deltas), plps = std::move(plps)]() mutable {
          GenerateRequest& m = *call->mirror[p];
          for (size_t c = 0; c < deltas.size(); ++c) {
            CompletionOutput& o = m.outputs[c];
            OutDelta& d = deltas[c];
            if (d.reset) {
              o.text = std::move(d.text);
            } else {
              o.text += d.text;
            }
            o.token_ids.insert(o.token_ids.end(), d.tokens.begin(), d.tokens.end());
            for (auto& lp : d.logprobs) o.logprobs.push_back(std::move(lp));
            o.finish_reason = d.finish_reason;
            o.stop_token = d.stop_token;
            o.stop_string = d.stop_string;
          }
          for (auto& lp : plps) m.prompt_logprobs.push_back(std::move(lp));
          std::lock_guard<std::mutex> lock(call->mu);
          if (!call->failed.ok() || call->responded) return;
          call->ex->Write(call->chat_stream ? call->chat_stream->Update(m)
                                            : call->stream->Update(p, m));
        });
      };
    }
    g->sink.on_done = [this, call, p](GenerateRequest& r, const Status& st) {
      // The engine no longer touches a finished request: the worker may read it.
      Enqueue(call, [this, call, p, &r, st] { OnRequestDone(call, p, r, st); });
    };
    call->reqs.push_back(std::move(g));
  }
  if (cr.stream) {
    for (size_t p = 0; p < call->reqs.size(); ++p) {
      auto m = std::make_unique<GenerateRequest>();
      m->prompt = call->reqs[p]->prompt;
      m->params = cr.params;
      m->outputs.resize(static_cast<size_t>(cr.params.n));
      call->mirror.push_back(std::move(m));
    }
    call->copied_text.assign(call->reqs.size(), std::vector<size_t>(cr.params.n, 0));
    call->copied_tokens.assign(call->reqs.size(), std::vector<size_t>(cr.params.n, 0));
    call->copied_prompt_lps.assign(call->reqs.size(), 0);
  }
  cr.prompts.clear();
  cr.prompts.resize(call->reqs.size());  // the stream sizes its choices by the prompt count
  if (cr.stream) {
    if (call->chat) {
      call->chat_stream = std::make_unique<io::ChatStream>(call->chat_ctx, *call->chat);
    }
    call->stream = std::make_unique<io::CompletionStream>(call->ctx, call->creq);
    HttpResponse head;
    head.content_type = "text/event-stream";
    call->ex->BeginStream(std::move(head));
  }
  call->ex->OnDisconnect([this, weak = std::weak_ptr<Call>(call)] {
    if (auto c = weak.lock()) {
      metrics_->cancelled++;
      for (auto& r : c->reqs) loop_->Cancel(*r);
    }
  });
  for (size_t p = 0; p < call->reqs.size(); ++p) {
    Status s = loop_->Submit(call->reqs[p]);
    if (!s.ok()) {
      for (size_t q = 0; q < p; ++q) loop_->Cancel(*call->reqs[q]);
      for (size_t q = p; q < call->reqs.size(); ++q) {
        Enqueue(call, [this, call, q, s] { OnRequestDone(call, q, *call->reqs[q], s); });
      }
      return;
    }
  }
}

StatusOr<std::string> GenerationService::Tokenize(const std::string& body, bool detokenize) const {
  ASSIGN_OR_RETURN(simdjson::dom::object obj, io::ParseObject(body));
  io::Fields f(obj, "");
  std::string model;
  RETURN_IF_ERROR(f.GetString("model", &model));
  if (!ModelMatches(model)) {
    return NotFound("model \"" + model + "\" is not served here; this server serves \"" +
                    options_.served_name + "\"");
  }
  if (!tokenizer_) return FailedPrecondition("this model has no tokenizer (tokenizer.json)");
  io::JsonWriter w;
  w.BeginObject();
  simdjson::dom::element e;
  if (detokenize) {
    simdjson::dom::array a;
    if (!f.Get("tokens", &e) || e.get(a)) return io::FieldError("tokens", "must be a list of ids");
    std::vector<int32_t> ids;
    for (auto x : a) {
      int64_t id;
      if (x.get(id) || id < 0 || id >= loop_->limits().vocab_size) {
        return io::FieldError("tokens", "must be token ids below the vocabulary size " +
                                            std::to_string(loop_->limits().vocab_size));
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    RETURN_IF_ERROR(f.CheckNoUnknown());
    ASSIGN_OR_RETURN(std::string text, tokenizer_->Decode(ids, true));
    w.KeyString("prompt", text);
    w.EndObject();
    return w.Take();
  }
  // A prompt, or messages rendered through the chat template (vLLM's two forms).
  std::string text;
  bool add_special = true, strs = false;
  if (f.Get("messages", &e)) {
    io::ChatTokens toks{tokenizer_->config().bos_token.value_or(""),
                        tokenizer_->config().eos_token.value_or("")};
    io::ChatRequest req;
    RETURN_IF_ERROR(io::ReadChatTemplateFields(f, toks, &req));
    const std::string& tmpl = req.chat_template ? *req.chat_template : options_.chat_template;
    if (tmpl.empty()) return FailedPrecondition("the model has no chat template");
    auto rendered = options_.render_chat(tmpl, req.context_json);
    if (!rendered.ok()) return rendered.status().WithContext("chat template");
    text = std::move(rendered).value();
    add_special = false;  // the template writes the special tokens
  } else {
    if (!f.Get("prompt", &e)) return io::FieldError("prompt", "is required (or \"messages\")");
    RETURN_IF_ERROR(f.GetString("prompt", &text));
  }
  RETURN_IF_ERROR(f.GetBool("add_special_tokens", &add_special));
  RETURN_IF_ERROR(f.GetBool("return_token_strs", &strs));
  RETURN_IF_ERROR(f.CheckNoUnknown());
  ASSIGN_OR_RETURN(Encoding enc, tokenizer_->Encode(text, add_special));
  w.KeyInt("count", static_cast<int64_t>(enc.ids.size()));
  w.KeyInt("max_model_len", loop_->limits().max_model_len);
  w.Key("tokens");
  w.Ints(enc.ids);
  if (strs) {
    w.Key("token_strs");
    w.BeginArray();
    for (const auto& t : enc.tokens) w.String(t);
    w.EndArray();
  }
  w.EndObject();
  return w.Take();
}

Status GenerationService::PrepareChat(Call& call) {
  io::ChatTokens toks;
  if (tokenizer_) {
    toks.bos = tokenizer_->config().bos_token.value_or("");
    toks.eos = tokenizer_->config().eos_token.value_or("");
  }
  ASSIGN_OR_RETURN(io::ChatRequest req, io::ParseChatRequest(call.req.body, toks));
  const std::string& tmpl = req.chat_template ? *req.chat_template : options_.chat_template;
  if (tmpl.empty()) {
    return FailedPrecondition(
        "the model has no chat template (tokenizer_config.json chat_template, "
        "chat_template.jinja or --chat-template); send \"chat_template\" with the request or "
        "use /v1/completions");
  }
  if (!tokenizer_) return FailedPrecondition("chat needs the model's tokenizer (tokenizer.json)");
  auto prompt = options_.render_chat(tmpl, req.context_json);
  if (!prompt.ok()) return prompt.status().WithContext("chat template");
  ASSIGN_OR_RETURN(Encoding enc, tokenizer_->Encode(*prompt, false));
  call.chat_ctx.thinking = io::PromptOpensThinking(*prompt);
  io::CompletionRequest& cr = call.creq;
  cr.model = req.model;
  cr.prompts = {std::move(enc.ids)};
  cr.params = req.params;
  if (auto tc = io::ToolCallConstraint(req, call.chat_ctx.thinking)) {
    cr.params.constraint = std::move(*tc);
    cr.params.grammar.reset();
  }
  cr.stream = req.stream;
  cr.include_usage = req.include_usage;
  cr.user = req.user;
  call.chat = std::make_unique<io::ChatRequest>(std::move(req));
  return Status::Ok();
}

void GenerationService::Enqueue(const std::shared_ptr<Call>& call, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(call->qmu);
    call->queue.push_back(std::move(task));
    if (call->draining) return;
    call->draining = true;
  }
  pool_->Post([call] {
    for (;;) {
      std::function<void()> t;
      {
        std::lock_guard<std::mutex> lock(call->qmu);
        if (call->queue.empty()) {
          call->draining = false;
          return;
        }
        t = std::move(call->queue.front());
        call->queue.pop_front();
      }
      t();
    }
  });
}

void GenerationService::OnRequestDone(const std::shared_ptr<Call>& call, size_t p,
                                      GenerateRequest& r, const Status& st) {
  bool last = false, streamed = false;
  {
    std::lock_guard<std::mutex> lock(call->mu);
    if (!st.ok() && call->failed.ok()) {
      call->failed = st;
      for (auto& other : call->reqs) {
        if (other.get() != &r) other->cancelled.store(true);
      }
    }
    last = --call->remaining == 0;
    if (st.ok()) {
      if (call->chat_stream) {
        call->ex->Write(call->chat_stream->Update(r));
      } else if (call->stream) {
        call->ex->Write(call->stream->Update(p, r));
      }
      // Per-request metrics.
      GenMetrics& m = *metrics_;
      if (r.first_token != SteadyClock::time_point{}) {
        m.ttft.Observe(Seconds(r.arrival, r.first_token));
      }
      m.e2e.Observe(Seconds(r.arrival, r.finished));
      if (r.scheduled != SteadyClock::time_point{}) {
        m.queue.Observe(Seconds(r.arrival, r.scheduled));
        if (r.first_token != SteadyClock::time_point{}) {
          m.prefill.Observe(Seconds(r.scheduled, r.first_token));
          m.decode.Observe(Seconds(r.first_token, r.finished));
        }
      }
      m.prompt_len.Observe(static_cast<double>(r.prompt.size()));
      std::lock_guard<std::mutex> ml(m.mu);
      for (const CompletionOutput& o : r.outputs) {
        m.gen_len.Observe(static_cast<double>(o.token_ids.size()));
        for (size_t i = 1; i < o.token_times.size(); ++i) {
          m.itl.Observe(o.token_times[i] - o.token_times[i - 1]);
        }
        ++m.finished[o.finish_reason.empty() ? "abort" : o.finish_reason];
      }
    } else {
      std::lock_guard<std::mutex> ml(metrics_->mu);
      ++metrics_->finished["abort"];
    }
    if (!last) return;
    call->responded = true;
    if (call->stream) {
      if (!call->failed.ok()) {
        io::JsonWriter w;
        w.BeginObject();
        w.Key("error");
        w.BeginObject();
        w.KeyString("message", call->failed.message());
        w.KeyString("type", "server_error");
        w.EndObject();
        w.EndObject();
        call->ex->Write("data: " + w.Take() + "\n\ndata: [DONE]\n\n");
      } else if (call->chat_stream) {
        call->ex->Write(call->chat_stream->Finish(*call->reqs[0]));
      } else {
        call->ex->Write(call->stream->Finish(call->reqs));
      }
      call->ex->End();
      const int status = call->ex->disconnected() ? 499 : 200;
      {
        std::lock_guard<std::mutex> ml(metrics_->mu);
        ++metrics_->responses[{call->route, status}];
      }
      if (call->counted) {
        call->counted = false;
        in_flight_--;
      }
      streamed = true;
    }
  }
  if (!streamed) {  // non-streaming (on a worker): the whole response
    if (!call->failed.ok()) {
      Respond(call, StatusResponse(call->failed));
    } else {
      HttpResponse resp;
      resp.body = call->chat ? io::ChatResponse(call->chat_ctx, *call->chat, *call->reqs[0])
                             : io::CompletionResponse(call->ctx, call->creq, call->reqs);
      Respond(call, std::move(resp));
    }
  }
  // The requests' sinks hold the call: dropping the call's hold on the requests ends the
  // cycle (the engine released them before their on_done ran; `r` is not used after this).
  std::vector<std::shared_ptr<GenerateRequest>> drop;
  drop.swap(call->reqs);
}

bool GenerationService::ModelMatches(const std::string& requested) const {
  return requested.empty() || requested == options_.served_name ||
         requested == options_.served_name + ":" + options_.served_version;
}

std::string GenerationService::RenderMetrics() const {
  const GenerationSnapshot s = loop_->snapshot();
  const std::string model = "model=\"" + Label(options_.served_name) + "\",version=\"" +
                            Label(options_.served_version) + "\"";
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& v,
                    const std::string& extra = "") {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    out += std::string(name) + "{" + model + extra + "} " + v + "\n";
  };
  metric("sluice_num_requests_running", "gauge",
         "Sequences running (scheduled for prefill or decode).", std::to_string(s.running));
  metric("sluice_num_requests_waiting", "gauge",
         "Sequences waiting (new or preempted) and requests not yet admitted.",
         std::to_string(s.waiting));
  metric("sluice_num_requests", "gauge", "Requests in the engine.", std::to_string(s.requests));
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.6f",
                s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_in_use) /
                                            static_cast<double>(s.kv_blocks_total)
                                      : 0.0);
  metric("sluice_kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0-1).", frac);
  metric("sluice_kv_cache_blocks_in_use", "gauge", "KV-cache blocks held by sequences.",
         std::to_string(s.kv_blocks_in_use));
  metric("sluice_kv_cache_blocks_total", "gauge", "KV-cache blocks (16 tokens each).",
         std::to_string(s.kv_blocks_total));
  metric("sluice_prefix_cache_queries_total", "counter", "Prompt tokens looked up.",
         std::to_string(s.prefix_queries));
  metric("sluice_prefix_cache_hits_total", "counter", "Prompt tokens found in cached blocks.",
         std::to_string(s.prefix_hits));
  metric("sluice_prompt_tokens_total", "counter", "Prompt tokens computed (prefill).",
         std::to_string(s.prompt_tokens));
  metric("sluice_generation_tokens_total", "counter", "Tokens generated.",
         std::to_string(s.generation_tokens));
  metric("sluice_num_preemptions_total", "counter", "Sequences preempted (recomputed later).",
         std::to_string(s.preemptions));
  metric("sluice_engine_steps_total", "counter", "Engine steps (forwards).",
         std::to_string(s.steps));
  metric("sluice_engine_step_tokens_total", "counter",
         "Tokens computed over all steps (tokens per step = this / steps).",
         std::to_string(s.step_tokens_total));
  metric("sluice_requests_cancelled_total", "counter", "Requests whose client went away.",
         std::to_string(metrics_->cancelled.load()));
  std::lock_guard<std::mutex> lock(metrics_->mu);
  out +=
      "# HELP sluice_request_success_total Finished completions by finish reason.\n"
      "# TYPE sluice_request_success_total counter\n";
  for (const auto& [reason, n] : metrics_->finished) {
    out += "sluice_request_success_total{" + model + ",finished_reason=\"" + reason + "\"} " +
           std::to_string(n) + "\n";
  }
  out +=
      "# HELP sluice_http_requests_total HTTP responses by route and status.\n"
      "# TYPE sluice_http_requests_total counter\n";
  for (const auto& [key, n] : metrics_->responses) {
    out += "sluice_http_requests_total{" + model + ",route=\"" + Label(key.first) + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
  }
  auto hist = [&](const char* name, const char* help, const Histogram& h) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    h.Render(&out, name, model);
  };
  hist("sluice_time_to_first_token_seconds", "Arrival to first token.", metrics_->ttft);
  hist("sluice_inter_token_latency_seconds", "Between consecutive tokens of a sequence.",
       metrics_->itl);
  hist("sluice_e2e_request_latency_seconds", "Arrival to the last token.", metrics_->e2e);
  hist("sluice_request_queue_time_seconds", "Arrival to the first step that ran it.",
       metrics_->queue);
  hist("sluice_request_prefill_time_seconds", "First step to first token.", metrics_->prefill);
  hist("sluice_request_decode_time_seconds", "First token to the last.", metrics_->decode);
  hist("sluice_request_prompt_tokens", "Prompt length per request.", metrics_->prompt_len);
  hist("sluice_request_generation_tokens", "Generated tokens per completion.", metrics_->gen_len);
  return out;
}

}  // namespace sluice::server
