#include "server/served_model.h"

#include <future>

#include "io/builtins.h"

namespace sluice::server {

std::string ModelLabels(const std::string& name, const std::string& version) {
  return "model=\"" + LabelValue(name) + "\",version=\"" + LabelValue(version) + "\"";
}

bool IsScoringRoute(const std::string& path) {
  static const io::ProcessorRegistry* routes = new io::ProcessorRegistry();
  return routes->Find(path) != nullptr || path.rfind("/plugins/", 0) == 0;
}

bool IsGenerationRoute(const std::string& path) {
  return path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
         path == "/detokenize";
}

ScoringModel::ScoringModel(std::unique_ptr<Engine> engine, ScoringModelOptions o)
    : plugins_(std::move(o.plugins)),
      ctx_(std::move(o.context)),
      metrics_(ModelLabels(o.name, o.version)) {
  EngineLoopOptions lo = std::move(o.loop);
  lo.on_batch = [this](const BatchStats& b) {
    metrics_.RecordBatch(b.num_seqs, b.num_tokens, b.device_seconds);
    metrics_.RecordPrefixReuse(b.prefix_groups, b.prefix_tokens_saved);
  };
  loop_ = std::make_unique<EngineLoop>(std::move(engine), std::move(lo));
  service_ = std::make_unique<Service>(o.service, loop_.get(), &ctx_, &metrics_);
}

ScoringModel::~ScoringModel() {
  service_.reset();
  loop_.reset();
}

bool ScoringModel::ServesRoute(const std::string& path) const { return IsScoringRoute(path); }

Status ScoringModel::WarmUp() {
  auto promise = std::make_shared<std::promise<Status>>();
  auto r = std::make_shared<EngineRequest>();
  const int n = std::min(16, ctx_.model_max_tokens);
  r->inputs.push_back(TokenSequence{std::vector<int32_t>(n, 0), {}});
  r->sink.on_done = [promise](EngineRequest&, const Status& s) { promise->set_value(s); };
  RETURN_IF_ERROR(loop_->Submit(r));
  return promise->get_future().get().WithContext("warm-up");
}

std::string ScoringModel::RenderMetrics() const {
  GaugeValues g;
  g.queue_depth = loop_->queue_depth();
  g.in_flight = service_->in_flight();
  g.ready = service_->ready() ? 1 : 0;
  return metrics_.Render(g);
}

GenerationModel::GenerationModel(std::unique_ptr<Generator> generator,
                                 std::shared_ptr<const void> keep_alive, const Tokenizer* tokenizer,
                                 GenerationLoopOptions loop, GenerationServiceOptions service)
    : keep_alive_(std::move(keep_alive)) {
  loop_ = std::make_unique<GenerationLoop>(std::move(generator), loop);
  service_ = std::make_unique<GenerationService>(std::move(service), loop_.get(), tokenizer);
}

GenerationModel::~GenerationModel() {
  service_.reset();
  loop_.reset();
}

bool GenerationModel::ServesRoute(const std::string& path) const { return IsGenerationRoute(path); }

Status GenerationModel::WarmUp() {
  auto promise = std::make_shared<std::promise<Status>>();
  auto r = std::make_shared<GenerateRequest>();
  r->id = "warm-up";
  r->prompt = {0};
  r->params.max_tokens = 1;
  r->params.temperature = 0.f;
  r->params.ignore_eos = true;
  r->sink.on_done = [promise](GenerateRequest&, const Status& s) { promise->set_value(s); };
  RETURN_IF_ERROR(loop_->Submit(r));
  return promise->get_future().get().WithContext("warm-up");
}

std::string GenerationModel::RenderMetrics() const { return service_->MetricsText(); }

}  // namespace sluice::server
