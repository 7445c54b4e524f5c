#include "models/registry.h"

#include <algorithm>
#include <map>

namespace sluice {
namespace {

std::map<std::string, ArchitectureInfo, std::less<>>& Registry() {
  static std::map<std::string, ArchitectureInfo, std::less<>> archs;
  return archs;
}

}  // namespace

ArchitectureRegistration::ArchitectureRegistration(std::vector<ArchitectureInfo> archs) {
  for (auto& a : archs) Registry()[a.name] = std::move(a);
}

const char* TaskName(Task t) {
  switch (t) {
    case Task::kEmbed:
      return "embed";
    case Task::kClassify:
      return "classify";
    case Task::kScore:
      return "score";
    case Task::kTokenClassify:
      return "token-classify";
    case Task::kGenerate:
      return "generate";
  }
  return "?";
}

bool ParseTask(std::string_view s, Task* out) {
  if (s == "embed" || s == "embedding")
    *out = Task::kEmbed;
  else if (s == "classify" || s == "classification")
    *out = Task::kClassify;
  else if (s == "score" || s == "rerank")
    *out = Task::kScore;
  else if (s == "token-classify")
    *out = Task::kTokenClassify;
  else if (s == "generate")
    *out = Task::kGenerate;
  else
    return false;
  return true;
}

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> out;
  for (const auto& [name, a] : Registry()) out.push_back(name);
  return out;
}

StatusOr<const ArchitectureInfo*> LookupArchitecture(const ModelConfig& config) {
  auto it = Registry().find(config.architecture);
  if (it != Registry().end()) return &it->second;
  std::string list;
  for (const auto& n : SupportedArchitectures()) list += (list.empty() ? "" : ", ") + n;
  if (config.architecture.empty()) {
    return Unsupported(config.dir +
                       "/config.json has no \"architectures\" entry; supported: " + list);
  }
  return Unsupported("architecture " + config.architecture +
                     " is not supported (supported: " + list + ")");
}

StatusOr<std::string> ResolveWeightPrefix(const ArchitectureInfo& arch,
                                          const WeightStore& weights) {
  for (const std::string& p : arch.prefixes) {
    if (weights.Has(p + arch.probe)) return p;
  }
  std::string tried;
  for (const std::string& p : arch.prefixes) tried += (tried.empty() ? "" : ", ") + p + arch.probe;
  return NotFound("cannot find the base model weights of " + arch.name + " (looked for " + tried +
                  ") in " + weights.description());
}

StatusOr<std::unique_ptr<Model>> CreateModel(const ArchitectureInfo& arch,
                                             const ModelConfig& config, const WeightStore& weights,
                                             Backend* backend, const ModelLoadOptions& options) {
  if (arch.factory == nullptr) return Internal("architecture " + arch.name + " has no factory");
  return arch.factory(config, weights, backend, options);
}

}  // namespace sluice
