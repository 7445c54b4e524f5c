// One loaded (name, version) of the model registry: its engine loop and the HTTP service
// in front of it (server/service.h for scoring models, server/generation_service.h for
// generation models). The router (server/router.h) hands it the requests routed to it;
// the registry (server/model_registry.h) warms it up, marks it ready and destroys it
// once nothing is in flight.
#pragma once

#include <memory>
#include <string>

#include "engine/engine_loop.h"
#include "engine/generation_loop.h"
#include "server/generation_service.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/service.h"

namespace sluice::server {

class ServedModel {
 public:
  virtual ~ServedModel() = default;
  virtual std::string task() const = 0;  // "score", "embed", ..., "generate"
  virtual bool generation() const = 0;
  virtual int64_t max_model_len() const = 0;
  // Whether an inference route (POST path) belongs to this kind of model.
  virtual bool ServesRoute(const std::string& path) const = 0;
  // One forward (scoring) or one generated token (generation): the first client does not
  // pay for lazy set-up. Run before the version becomes ready.
  virtual Status WarmUp() = 0;
  virtual void SetReady() = 0;
  virtual void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) = 0;
  // Prometheus text, every series labelled with model and version.
  virtual std::string RenderMetrics() const = 0;
  // Fails queued work (503) and joins the loop's threads.
  virtual void Shutdown() = 0;
  // The scoring model's context (null for generation models): KServe infer.
  virtual const ModelContext* context() const { return nullptr; }
  // The IO processors (docs/plugins.md) this version serves by name (/plugins/NAME, /pooling
  // with "io_processor"): whether it has `name` (built-in or plugin); its plugins' "a, b" (or
  // "none"); the built-ins' names (empty: it serves none by name). Const after construction.
  virtual bool HasIoProcessor(const std::string& name) const {
    (void)name;
    return false;
  }
  virtual std::string PluginIoProcessorNames() const { return "none"; }
  virtual std::string BuiltinIoProcessorNames() const { return ""; }
  // Where its serving loop's threads run, and a hold on given CPUs (EngineLoop::placement,
  // HoldPlacement): a default switch hands the old default's placement to the new one.
  // Generation models: none (their loop is one thread).
  virtual LoopPlacement placement() const { return {}; }
  virtual void HoldPlacement(const LoopPlacement& p, std::chrono::milliseconds duration) {
    (void)p;
    (void)duration;
  }
};

// `model="NAME",version="V"` (escaped for the exposition format).
std::string ModelLabels(const std::string& name, const std::string& version);

struct ScoringModelOptions {
  ModelContext context;  // built by io::BuildModelContext
  // The companion (sluice.json absa.sentiment_model) whose context is context.companion:
  // served on its own engine loop beside the model's (same loop options).
  std::unique_ptr<Engine> companion;
  EngineLoopOptions loop;
  ServiceOptions service;  // service.plugin_io: from io::BindPluginIoProcessors(*plugins)
  std::string name, version;
  std::shared_ptr<const PluginSet> plugins;  // the libraries (kept loaded while served)
};

class ScoringModel : public ServedModel {
 public:
  ScoringModel(std::unique_ptr<Engine> engine, ScoringModelOptions options);
  ~ScoringModel() override;
  std::string task() const override { return ctx_.task; }
  bool generation() const override { return false; }
  int64_t max_model_len() const override { return ctx_.model_max_tokens; }
  LoopPlacement placement() const override { return loop_->placement(); }
  void HoldPlacement(const LoopPlacement& p, std::chrono::milliseconds duration) override {
    loop_->HoldPlacement(p, duration);
  }
  bool ServesRoute(const std::string& path) const override;
  Status WarmUp() override;
  void SetReady() override { service_->SetReady(true); }
  void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) override {
    service_->Handle(std::move(req), std::move(ex));
  }
  std::string RenderMetrics() const override;
  void Shutdown() override {
    loop_->Shutdown();
    if (companion_loop_) companion_loop_->Shutdown();
  }
  const ModelContext* context() const override { return &ctx_; }
  bool HasIoProcessor(const std::string& name) const override {
    return service_->processors().Find(name) != nullptr;
  }
  std::string PluginIoProcessorNames() const override {
    return service_->processors().PluginNames();
  }
  std::string BuiltinIoProcessorNames() const override {
    return io::ProcessorRegistry::BuiltinNames();
  }
  Service& service() { return *service_; }
  EngineLoop& loop() { return *loop_; }

 private:
  std::shared_ptr<const PluginSet> plugins_;  // destroyed last: after the service's requests
  const ModelContext ctx_;
  Metrics metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<EngineLoop> companion_loop_;  // null: no companion
  std::unique_ptr<Service> service_;            // destroyed first: its workers joined
};

class GenerationModel : public ServedModel {
 public:
  // `tokenizer` may be null; it must outlive the model (it lives in the bundle, kept here).
  GenerationModel(std::unique_ptr<Generator> generator, std::shared_ptr<const void> keep_alive,
                  const Tokenizer* tokenizer, GenerationLoopOptions loop,
                  GenerationServiceOptions service);
  ~GenerationModel() override;
  std::string task() const override { return "generate"; }
  bool generation() const override { return true; }
  int64_t max_model_len() const override { return loop_->limits().max_model_len; }
  bool ServesRoute(const std::string& path) const override;
  Status WarmUp() override;
  void SetReady() override { service_->SetReady(true); }
  void Handle(HttpRequest&& req, std::shared_ptr<Exchange> ex) override {
    service_->Handle(std::move(req), std::move(ex));
  }
  std::string RenderMetrics() const override;
  void Shutdown() override { loop_->Shutdown(); }

 private:
  std::shared_ptr<const void> keep_alive_;  // the bundle (tokenizer)
  std::unique_ptr<GenerationLoop> loop_;
  std::unique_ptr<GenerationService> service_;
};

// Scoring routes (the IO processors') and generation routes, for routing requests that
// name no model.
bool IsScoringRoute(const std::string& path);
bool IsGenerationRoute(const std::string& path);

}  // namespace sluice::server
