// The HTTP application of a generation model: OpenAI /v1/completions (JSON or server-sent
// events), model listing, health and readiness, and vLLM-style generation metrics, in
// front of a GenerationLoop. Scoring routes answer 400 naming the model's task.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "engine/generation_loop.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/worker_pool.h"
#include "sluice/status.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::server {

// Renders a chat template (Jinja) over a context given as JSON; errors name the template
// line. Required.
using ChatRenderer = std::function<StatusOr<std::string>(const std::string& chat_template,
                                                         const std::string& context_json)>;

struct GenerationServiceOptions {
  std::string served_name;
  std::string served_version = "1";  // `model` may be "name" or "name:version"
  std::string chat_template;  // the model's (tokenizer_config.json, chat_template.jinja, flag)
  ChatRenderer render_chat;
  std::string api_key;               // empty = no auth
  bool metrics_require_key = false;  // /metrics behind the API key too
  int workers = 2;                   // request parsing and tokenisation
  int64_t max_prompts_per_request = 256;
};

class GenerationService {
 public:
  // `loop` must outlive the service; `tokenizer` may be null (token-id prompts only).
  GenerationService(GenerationServiceOptions options, GenerationLoop* loop,
                    const Tokenizer* tokenizer);
  ~GenerationService();

  void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex);
  // Prometheus text of this model (every series labelled with model and version).
  std::string MetricsText() const { return RenderMetrics(); }
  void SetReady(bool ready) { ready_ = ready; }
  void BeginDrain() { draining_ = true; }
  int in_flight() const { return in_flight_.load(); }

 private:
  struct Call;
  struct GenMetrics;
  void Complete(std::shared_ptr<Call> call);
  // /v1/chat/completions: request -> rendered template -> the call's one prompt.
  Status PrepareChat(Call& call);
  // vLLM /tokenize (a prompt, or messages through the chat template) and /detokenize.
  StatusOr<std::string> Tokenize(const std::string& body, bool detokenize) const;
  void Respond(const std::shared_ptr<Call>& call, HttpResponse r);
  // Runs `task` on a worker after the call's earlier tasks, one at a time, in order.
  void Enqueue(const std::shared_ptr<Call>& call, std::function<void()> task);
  void OnRequestDone(const std::shared_ptr<Call>& call, size_t p, GenerateRequest& r,
                     const Status& st);
  std::string RenderMetrics() const;
  bool ModelMatches(const std::string& requested) const;

  GenerationServiceOptions options_;
  GenerationLoop* loop_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<GenMetrics> metrics_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_id_{1};
  std::unique_ptr<WorkerPool> pool_;  // last: joined first on destruction
};

}  // namespace sluice::server
