#include "server/served_model.h"

#include <future>

#include "io/builtins.h"

namespace sluice::server {

std::string ModelLabels(const std::string& name, const std::string& version) {
  return "model=\"" + LabelValue(name) + "\",version=\"" + LabelValue(version) + "\"";
}

bool IsScoringRoute(const std::string& path) {
  static const io::ProcessorRegistry* routes = new io::ProcessorRegistry();
  return routes->FindRoute(path) != nullptr || path.rfind("/plugins/", 0) == 0;
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
  if (o.companion) {
    // The companion's batches are not this model's: its loop reports none.
    EngineLoopOptions co = lo;
    co.on_batch = nullptr;
    co.limits.max_batch_tokens = o.companion->options().max_batch_tokens;
    co.limits.max_num_seqs = o.companion->options().max_num_seqs;
    companion_loop_ = std::make_unique<EngineLoop>(std::move(o.companion), std::move(co));
  }
  loop_ = std::make_unique<EngineLoop>(std::move(engine), std::move(lo));
  service_ =
      std::make_unique<Service>(o.service, loop_.get(), &ctx_, &metrics_, companion_loop_.get());
}

ScoringModel::~ScoringModel() {
  service_.reset();
  loop_.reset();
  companion_loop_.reset();
}

bool ScoringModel::ServesRoute(const std::string& path) const { return IsScoringRoute(path); }

namespace {

Status WarmUpLoop(EngineLoop& loop, int max_tokens) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto r = std::make_shared<EngineRequest>();
  r->inputs.push_back(TokenSequence{std::vector<int32_t>(std::min(16, max_tokens), 0), {}});
  r->sink.on_done = [promise](EngineRequest&, const Status& s) { promise->set_value(s); };
  RETURN_IF_ERROR(loop.Submit(r));
  return promise->get_future().get();
}

}  // namespace

Status ScoringModel::WarmUp() {
  RETURN_IF_ERROR(WarmUpLoop(*loop_, ctx_.model_max_tokens).WithContext("warm-up"));
  if (companion_loop_ && ctx_.companion) {
    RETURN_IF_ERROR(WarmUpLoop(*companion_loop_, ctx_.companion->model_max_tokens)
                        .WithContext("warm-up of the absa sentiment model"));
  }
  return Status::Ok();
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
