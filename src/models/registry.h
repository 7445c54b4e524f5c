// The architecture registry: what an `architectures[0]` value of config.json means to
// sluice. Each architecture file registers its architectures at static-initialisation time
// (SLUICE_REGISTER_ARCHITECTURES), with everything the runtime needs to know about them:
// where the base model's weights live, whether it is causal, how it pools by default,
// which head it carries, which task it serves by default, and its factory. Nothing outside
// an architecture file compares architecture names or families.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/model.h"

namespace sluice {

enum class Task { kEmbed, kClassify, kScore, kTokenClassify, kGenerate };
const char* TaskName(Task t);
bool ParseTask(std::string_view s, Task* out);

// The head a checkpoint carries on top of its base model (resolved by src/pooling).
enum class HeadKind {
  kNone,                       // base model only: embeddings
  kBertPoolerClassifier,       // BERT pooler (tanh) + classifier
  kRobertaClassifier,          // RoBERTa classification head (dense tanh + out_proj)
  kScoreLast,                  // decoder `score` row at the last token
  kModernBertClassifier,       // ModernBERT prediction head (dense, act, LayerNorm) on the CLS
                               // row or the mean (classifier_pooling) -> classifier
  kTokenClassifier,            // per token: classifier (BERT/RoBERTa/XLM-R ForTokenClassification)
  kModernBertTokenClassifier,  // per token: prediction head -> classifier
  kLanguageModel,              // lm_head over the vocabulary (tied or not): generation, or the
                               // yes/no rows of a causal-LM reranker (--task score)
};

// How a model pools when nothing (sentence-transformers, sluice.json) says otherwise.
enum class DefaultPooling { kFirst, kLast };

struct ModelLoadOptions;
using ModelFactory = StatusOr<std::unique_ptr<Model>> (*)(const ModelConfig& config,
                                                          const WeightStore& weights,
                                                          Backend* backend,
                                                          const ModelLoadOptions& options);

struct ArchitectureInfo {
  std::string name;    // e.g. "BertForSequenceClassification"
  std::string family;  // descriptive, for logs and `sluice inspect` ("bert", "qwen3", ...)
  // Weight-name prefixes of the base model, tried in order (checkpoints save the base model
  // under its own name, e.g. "bert.", or at the top level).
  std::vector<std::string> prefixes;
  std::string probe;  // a tensor every checkpoint of the base model has (prefix detection)
  bool causal = false;
  DefaultPooling pooling = DefaultPooling::kFirst;
  HeadKind head = HeadKind::kNone;
  Task default_task = Task::kEmbed;
  ModelFactory factory = nullptr;
};

// Registers architectures; used through SLUICE_REGISTER_ARCHITECTURES at namespace scope.
struct ArchitectureRegistration {
  explicit ArchitectureRegistration(std::vector<ArchitectureInfo> archs);
};
#define SLUICE_REGISTER_ARCHITECTURES_CAT2(a, b) a##b
#define SLUICE_REGISTER_ARCHITECTURES_CAT(a, b) SLUICE_REGISTER_ARCHITECTURES_CAT2(a, b)
#define SLUICE_REGISTER_ARCHITECTURES(...)                                           \
  static const ::sluice::ArchitectureRegistration SLUICE_REGISTER_ARCHITECTURES_CAT( \
      sluice_architectures_, __LINE__)(__VA_ARGS__)

// Looks up an architecture; unknown names are refused with the list of supported ones.
StatusOr<const ArchitectureInfo*> LookupArchitecture(const ModelConfig& config);
std::vector<std::string> SupportedArchitectures();  // sorted

// The weight-name prefix of `arch`'s base model in `weights` (the first of arch.prefixes
// under which arch.probe exists).
StatusOr<std::string> ResolveWeightPrefix(const ArchitectureInfo& arch, const WeightStore& weights);

struct ModelLoadOptions {
  DType dtype = DType::kF32;  // compute dtype of linear weights
  std::string prefix;         // weight-name prefix of the base model
  // Pre-norm decoders and ModernBERT: keep the residual stream in the backend's activation dtype
  // (bf16/f16 on CUDA, as transformers and vLLM do) instead of f32. f32 is the default:
  // more accurate, a few percent slower on CUDA.
  bool activation_residual = false;
  // Causal LMs served for generation: load the full-vocabulary lm_head (tied to the
  // embedding table when the checkpoint has none) for Model::Logits.
  bool lm_head = false;
};

StatusOr<std::unique_ptr<Model>> CreateModel(const ArchitectureInfo& arch,
                                             const ModelConfig& config, const WeightStore& weights,
                                             Backend* backend, const ModelLoadOptions& options);

}  // namespace sluice
