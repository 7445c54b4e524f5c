// Pooling and heads, resolved once at load time from config.json, sentence-transformers
// modules and sluice.json.
//
// Device part: the pooler reduces packed hidden states to one row per sequence (CLS,
// MEAN, MAX, LAST) or keeps every token (ALL, STEP). Host part: the small per-sequence
// layers after pooling (BERT pooler + classifier, RoBERTa classification head, Qwen3
// score row, the two lm_head rows of a yes/no reranker, sentence-transformers Dense),
// then normalisation, calibration and activation, all in fp32 on the pooled rows only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/registry.h"
#include "sluice/sequence.h"

namespace sluice {

enum class PoolingKind { kCls, kMean, kMax, kLast, kAll, kStep };
const char* PoolingName(PoolingKind p);
bool ParsePooling(std::string_view s, PoolingKind* out);

enum class OutputActivation { kNone, kSigmoid, kSoftmax };
const char* OutputActivationName(OutputActivation a);

// One fp32 linear layer applied on the host to pooled rows.
struct HostLinear {
  std::string name;
  int in = 0, out = 0;
  std::vector<float> weight;  // [out, in]
  std::vector<float> bias;    // [out] or empty
  std::string act;            // "none" | "tanh" | "relu" | "gelu" | "sigmoid"
};

struct HeadSpec {
  Task task = Task::kEmbed;
  PoolingKind pooling = PoolingKind::kCls;
  std::vector<HostLinear> layers;
  bool yes_no = false;  // score = sigmoid(logit_yes - logit_no) over layers' 2 outputs
  int yes_token_id = -1, no_token_id = -1;
  bool normalize = false;  // L2-normalise embeddings
  OutputActivation activation = OutputActivation::kNone;
  std::vector<float> calibration_mean, calibration_std;
  std::vector<std::string> labels;
  std::vector<float> thresholds;
  int step_token_id = -1;
  int output_dim = 0;       // per pooled row
  std::string description;  // for logs and `sluice inspect`
};

struct HeadResolveInput {
  const ArchitectureInfo* arch = nullptr;
  const ModelConfig* config = nullptr;
  const SentenceTransformersConfig* st = nullptr;
  const SluiceOverrides* overrides = nullptr;
  const WeightStore* weights = nullptr;
  std::string weight_prefix;  // the base model's weight-name prefix (ResolveWeightPrefix)
  std::optional<Task> task;   // forced task (--task)
};

StatusOr<HeadSpec> ResolveHead(const HeadResolveInput& in);

// Applies the host part of a head to pooled rows.
class HeadRunner {
 public:
  explicit HeadRunner(const HeadSpec& spec) : spec_(spec) {}
  // first_layer > 0: the rows given to Apply are layer (first_layer - 1)'s output before its
  // activation (its matrix product ran on the device); the runner applies that activation
  // and the layers from first_layer on.
  HeadRunner(const HeadSpec& spec, int first_layer) : spec_(spec), first_layer_(first_layer) {}
  // pooled: [n, hidden] row-major. Writes one PooledOutput per row.
  void Apply(const float* pooled, int n, int hidden, PooledOutput* outs) const;
  // Token-level rows of one sequence (ALL/STEP): keeps per-row vectors, normalised if asked.
  void ApplyTokens(const float* rows, int n, int hidden, PooledOutput* out) const;

 private:
  const HeadSpec& spec_;
  int first_layer_ = 0;
};

// L2-normalises v in place (zero vectors stay zero, like torch.nn.functional.normalize).
void L2Normalize(float* v, int n);

}  // namespace sluice
