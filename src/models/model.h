// Model interface and the architecture registry.
//
// A Model runs the transformer stack of one architecture family on packed batches
// (no padding) and returns hidden states; pooling and heads (src/pooling) turn those
// into task outputs. Models are written once against the Backend interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "weights/config.h"
#include "weights/safetensors.h"

namespace sluice {

// A packed batch: the tokens of all sequences concatenated.
struct ForwardBatch {
  std::vector<int32_t> token_ids;       // [T]
  std::vector<int32_t> token_type_ids;  // [T] or empty (all zero)
  std::vector<int32_t> cu_seqlens;      // [S + 1], cu_seqlens[0] == 0
  int max_seqlen = 0;
  // Shared-prefix reuse: per sequence, the index of the packed sequence holding its prefix,
  // or -1; empty = no prefixes. A sequence with a prefix holds only its own tokens, whose
  // positions start at the prefix's length, and attends to the prefix's keys/values before
  // its own (see AttentionParams::prefix_of). A prefix sequence is an ordinary sequence
  // without a prefix of its own (its outputs are the caller's to discard). Models that
  // SupportsPrefixReuse() only.
  std::vector<int32_t> prefix_of;

  int num_seqs() const { return cu_seqlens.empty() ? 0 : static_cast<int>(cu_seqlens.size()) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Tokens before sequence s's own: its prefix's length, or 0.
  int PrefixLength(int s) const {
    const int p = prefix_of.empty() ? -1 : prefix_of[s];
    return p < 0 ? 0 : cu_seqlens[p + 1] - cu_seqlens[p];
  }
  void Clear();
  // Appends one sequence (type ids may be empty = zeros), without a prefix.
  void Add(const std::vector<int32_t>& ids, const std::vector<int32_t>& type_ids = {});
  // Appends `n` tokens (type ids zero) as one sequence whose prefix is the packed sequence
  // `prefix` (-1 = none).
  void AddWithPrefix(const int32_t* ids, int n, int prefix);
};

// Scratch device buffers reused across batches. Slot i keeps the largest buffer asked
// for so far; steady-state batches allocate nothing.
class Workspace {
 public:
  explicit Workspace(Backend* backend) : backend_(backend) {}
  Tensor Get(int slot, DType dtype, int64_t rows, int64_t cols);

 private:
  Backend* backend_;
  std::vector<Buffer> buffers_;
  std::vector<int64_t> capacity_;  // bytes
};

// Device-resident batch metadata, uploaded once per forward.
struct DeviceBatch {
  Tensor ids;         // i32 [T]
  Tensor type_ids;    // i32 [T] (zeros when absent)
  Tensor positions;   // i32 [T], 0-based within each sequence
  Tensor cu_seqlens;  // i32 [S + 1]
  int num_seqs = 0;
  int max_seqlen = 0;   // longest packed sequence
  int max_context = 0;  // longest prefix + own tokens (= max_seqlen without prefixes)
  // ForwardBatch::prefix_of: i32 [S] when the batch has prefixes, data == nullptr otherwise.
  Tensor prefix_of;
  int64_t num_tokens = 0;
  std::vector<int32_t> host_cu_seqlens;
  // Optional: when set (data != nullptr), Forward returns only these token rows
  // ([num_output_rows, hidden], in this order) and may skip the last layer's per-token
  // work (o-proj, MLP, norms) for every other row. Used for CLS/LAST pooling.
  Tensor output_rows;  // i32 [num_output_rows]
  int num_output_rows = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  int hidden_size() const { return config_.hidden_size; }
  DType compute_dtype() const { return dtype_; }
  // Longest sequence the model accepts (position embeddings / config limit).
  virtual int max_sequence_length() const { return config_.max_position_embeddings; }
  // Causal models whose Forward accepts ForwardBatch::prefix_of.
  virtual bool SupportsPrefixReuse() const { return false; }

  // Runs the stack; returns packed final hidden states [T, hidden] (f32, or the backend's
  // ActivationDType() for models that keep their hidden states in it), or the rows of
  // batch.output_rows when set, valid until the next Forward. `batch` must be uploaded by
  // PrepareBatch on the same workspace.
  virtual StatusOr<Tensor> Forward(const DeviceBatch& batch, Workspace& ws) = 0;

  // Uploads ids/types/positions/cu_seqlens (positions include any architecture offset).
  // Host scratch is reused across calls (no per-batch allocation in steady state).
  DeviceBatch PrepareBatch(const ForwardBatch& batch, Workspace& ws);
  // Sets batch.output_rows to one row per sequence: its first token (first = true) or
  // its last token.
  void SelectOutputRows(DeviceBatch& batch, Workspace& ws, bool first);

  // Validates token ids and lengths against the model (vocab, positions, type vocab).
  Status Validate(const ForwardBatch& batch) const;

 protected:
  Model(ModelConfig config, Backend* backend, DType dtype)
      : config_(std::move(config)), backend_(backend), dtype_(dtype) {}
  virtual int position_offset() const { return 0; }

  ModelConfig config_;
  Backend* backend_;
  DType dtype_;
  std::vector<int32_t> scratch_positions_, scratch_types_, scratch_rows_;
};

enum class Task { kEmbed, kClassify, kScore, kTokenClassify };
const char* TaskName(Task t);
bool ParseTask(std::string_view s, Task* out);

// What an `architectures[0]` value means to sluice.
struct ArchitectureInfo {
  std::string name;    // e.g. "BertForSequenceClassification"
  std::string family;  // "bert" | "qwen3"
  std::string prefix;  // weight-name prefix of the base model ("bert.", "model.", ...)
  std::string head;    // "none" | "bert_pooler_classifier" | "roberta_classifier" |
                       // "score_last" | "lm_yes_no"
  Task default_task = Task::kEmbed;
};

// Looks up an architecture; unknown names are refused with the list of supported ones.
StatusOr<ArchitectureInfo> LookupArchitecture(const ModelConfig& config);
std::vector<std::string> SupportedArchitectures();

struct ModelLoadOptions {
  DType dtype = DType::kF32;  // compute dtype of linear weights
  std::string prefix;         // weight-name prefix of the base model
};

StatusOr<std::unique_ptr<Model>> CreateModel(const ArchitectureInfo& arch,
                                             const ModelConfig& config, const WeightStore& weights,
                                             Backend* backend, const ModelLoadOptions& options);

}  // namespace sluice
