#include "engine/model_bundle.h"

#include <filesystem>

#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

namespace fs = std::filesystem;

std::vector<int> ModelBundle::DefaultStopTokenIds() const {
  if (!generation.eos_token_ids.empty()) return generation.eos_token_ids;
  if (!config.eos_token_ids.empty()) return config.eos_token_ids;
  if (tokenizer && tokenizer->config().eos_token) {
    if (auto id = tokenizer->TokenToId(*tokenizer->config().eos_token)) return {*id};
  }
  return {};
}

Status CheckModelDirectory(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return NotFound("model directory " + dir + " does not exist");
  if (!fs::is_directory(dir, ec))
    return NotFound(dir + " is not a model directory (not a directory)");
  return Status::Ok();
}

StatusOr<std::shared_ptr<const ModelBundle>> LoadModelBundle(const std::string& dir) {
  RETURN_IF_ERROR(CheckModelDirectory(dir));
  auto b = std::make_shared<ModelBundle>();
  b->dir = dir;
  ASSIGN_OR_RETURN(b->config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(b->arch, LookupArchitecture(b->config));
  ASSIGN_OR_RETURN(b->st, LoadSentenceTransformersConfig(dir));
  ASSIGN_OR_RETURN(b->overrides, LoadSluiceOverrides(dir));
  ASSIGN_OR_RETURN(b->generation, LoadGenerationConfig(dir));
  ASSIGN_OR_RETURN(WeightStore store, WeightStore::OpenDirectory(dir));
  b->weights = std::make_shared<const WeightStore>(std::move(store));
  ASSIGN_OR_RETURN(b->weight_prefix, ResolveWeightPrefix(*b->arch, *b->weights));
  if (fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "vocab.txt")) {
    auto t = Tokenizer::FromDirectory(dir);
    if (!t.ok()) return t.status().WithContext("tokenizer");
    b->tokenizer = std::shared_ptr<const Tokenizer>(std::move(t).value());
  }
  return std::shared_ptr<const ModelBundle>(std::move(b));
}

}  // namespace sluice
