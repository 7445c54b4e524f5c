// A model directory, read once: config.json, sentence-transformers modules, sluice.json,
// generation_config.json, the tokenizer (tokenizer.json / vocab.txt and
// tokenizer_config.json, when present), the weight files (mmap'ed) and the architecture
// they are for. Everything that loads a model (the engines, the IO context, `sluice
// inspect`) starts from a bundle instead of reading the directory again.
//
// Immutable after LoadModelBundle; safe to share between threads.
#pragma once

#include <memory>
#include <string>

#include "models/registry.h"
#include "weights/config.h"
#include "weights/safetensors.h"

namespace sluice {

class Tokenizer;

struct ModelBundle {
  std::string dir;
  ModelConfig config;
  SentenceTransformersConfig st;
  SluiceOverrides overrides;
  GenerationConfig generation;
  const ArchitectureInfo* arch = nullptr;
  std::string weight_prefix;  // of the base model (ResolveWeightPrefix)
  std::shared_ptr<const WeightStore> weights;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the directory has none

  // The token ids that end generation by default: generation_config.json's eos_token_id,
  // else config.json's, else the tokenizer's eos_token (tokenizer_config.json).
  std::vector<int> DefaultStopTokenIds() const;
};

// NotFound naming `dir` when it does not exist or is not a directory.
Status CheckModelDirectory(const std::string& dir);
StatusOr<std::shared_ptr<const ModelBundle>> LoadModelBundle(const std::string& dir);

}  // namespace sluice
