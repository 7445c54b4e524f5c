#include "io/builtins.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace sluice::io {

ProcessorRegistry::ProcessorRegistry() {
  routes_["/v1/embeddings"] = MakeEmbedProcessor(EmbedFlavor::kOpenAI);
  routes_["/embed"] = MakeEmbedProcessor(EmbedFlavor::kTei);
  routes_["/pooling"] = MakeEmbedProcessor(EmbedFlavor::kPooling);
  routes_["/classify"] = MakeClassifyProcessor(ClassifyFlavor::kVllm);
  routes_["/predict"] = MakeClassifyProcessor(ClassifyFlavor::kTei);
  routes_["/score"] = MakeScoreProcessor(ScoreFlavor::kScore);
  routes_["/v1/score"] = MakeScoreProcessor(ScoreFlavor::kScore);
  routes_["/v1/rerank"] = MakeScoreProcessor(ScoreFlavor::kRerank);
  routes_["/rerank"] = MakeScoreProcessor(ScoreFlavor::kRerank);
  routes_["/tokenize"] = MakeTokenizeProcessor(false);
  routes_["/detokenize"] = MakeTokenizeProcessor(true);
}

const IoProcessor* ProcessorRegistry::Find(const std::string& route) const {
  auto it = routes_.find(route);
  return it == routes_.end() ? nullptr : it->second.get();
}

std::string NewResponseId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix,
                static_cast<unsigned long long>(seed * 0x9E3779B97F4A7C15ull + counter++));
  return buf;
}

int64_t UnixSeconds() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace sluice::io
