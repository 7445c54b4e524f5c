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

// One fp32 linear layer of a head: y = norm(act(x W^T + b)). Applied on the host to pooled
// rows, or on the device to every token row (token-level heads, Pooler).
struct HostLinear {
  std::string name;
  int in = 0, out = 0;
  std::vector<float> weight;  // [out, in]
  std::vector<float> bias;    // [out] or empty
  // "none" | "tanh" | "relu" | "gelu" (erf) | "gelu_tanh" | "silu" | "sigmoid"
  std::string act;
  // Optional LayerNorm after the activation (ModernBERT's prediction head): weight [out]
  // (empty = none), bias [out] or empty.
  std::vector<float> norm_weight, norm_bias;
  float norm_eps = 1e-5f;
};

struct HeadSpec {
  Task task = Task::kEmbed;
  PoolingKind pooling = PoolingKind::kCls;
  std::vector<HostLinear> layers;
  bool yes_no = false;  // score = sigmoid(logit_yes - logit_no) over layers' 2 outputs
  int yes_token_id = -1, no_token_id = -1;
  // Embeddings (task embed): the engine returns them as the model computes them, before any
  // normalisation; the routes and `sluice embed` L2-normalise them unless asked not to
  // (NormalizeByDefault). st_normalize: the sentence-transformers pipeline ends in a
  // Normalize module (what its reference outputs include).
  bool normalize = true;  // the default: sluice.json "normalize", else true (as vLLM)
  bool st_normalize = false;
  // Late interaction (sluice.json): token-level rows after the Dense projection, each
  // L2-normalised by the engine, scored by MaxSim (task score).
  bool late_interaction = false;
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
  // Token-level rows of one sequence (ALL/STEP), after the head's layers ran on the device
  // (Pooler; a last activation the device lacks, tanh/sigmoid, is applied here): embeddings
  // keep per-row vectors (late interaction: L2-normalised); token classification gets per-row
  // probabilities (values) and logits (raw), rows x labels.
  void ApplyTokens(const float* rows, int n, int width, PooledOutput* out) const;

 private:
  const HeadSpec& spec_;
  int first_layer_ = 0;
};

// The backend activation of a host activation name; false when the device has none (tanh,
// sigmoid). `out` may be null.
bool DeviceActivation(const std::string& act, Activation* out);

// L2-normalises v in place (zero vectors stay zero, like torch.nn.functional.normalize).
void L2Normalize(float* v, int n);
// L2-normalises each of out's rows (one row, or token-level rows).
void NormalizeRows(PooledOutput* out);
// MaxSim (ColBERT late interaction): sum over the rows of q of the largest dot product with
// any row of d (both [rows, dim]); 0 when either has no rows.
float MaxSim(const PooledOutput& q, const PooledOutput& d);
// ColBERT's document skiplist: drops the rows of token-level output `out` (one row per token
// of `ids`) whose token is in `skip` (sorted), as PyLate drops them from documents; its
// token_indices become the kept tokens' positions. Nothing when the rows are not the tokens.
void DropSkiplistRows(const std::vector<int32_t>& ids, const std::vector<int32_t>& skip,
                      PooledOutput* out);

// The host name ("none", "gelu", ...) of a transformers activation name (hidden_act /
// classifier_activation spellings: gelu, gelu_new, gelu_pytorch_tanh, relu, silu, tanh, ...).
StatusOr<std::string> HostActivation(const std::string& hf_name);
// y = act(x) for a host activation name.
float ApplyHostActivation(const std::string& act, float x);

}  // namespace sluice
