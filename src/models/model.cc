#include "models/model.h"

#include <algorithm>

namespace sluice {

void ForwardBatch::Clear() {
  token_ids.clear();
  token_type_ids.clear();
  cu_seqlens.clear();
  max_seqlen = 0;
  prefix_of.clear();
}

void ForwardBatch::Add(const std::vector<int32_t>& ids, const std::vector<int32_t>& type_ids) {
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  const bool had_types = !token_type_ids.empty();
  if (!type_ids.empty() && !had_types) token_type_ids.assign(token_ids.size(), 0);
  token_ids.insert(token_ids.end(), ids.begin(), ids.end());
  if (!type_ids.empty()) {
    token_type_ids.insert(token_type_ids.end(), type_ids.begin(), type_ids.end());
  } else if (had_types) {
    token_type_ids.resize(token_ids.size(), 0);
  }
  cu_seqlens.push_back(static_cast<int32_t>(token_ids.size()));
  if (!prefix_of.empty()) prefix_of.push_back(-1);
  max_seqlen = std::max(max_seqlen, static_cast<int>(ids.size()));
}

void ForwardBatch::AddWithPrefix(const int32_t* ids, int n, int prefix) {
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  prefix_of.resize(static_cast<size_t>(num_seqs()), -1);
  token_ids.insert(token_ids.end(), ids, ids + n);
  if (!token_type_ids.empty()) token_type_ids.resize(token_ids.size(), 0);
  cu_seqlens.push_back(static_cast<int32_t>(token_ids.size()));
  prefix_of.push_back(prefix);
  max_seqlen = std::max(max_seqlen, n);
}

Tensor Workspace::Get(int slot, DType dtype, int64_t rows, int64_t cols) {
  if (static_cast<size_t>(slot) >= buffers_.size()) {
    buffers_.resize(slot + 1);
    capacity_.resize(slot + 1, 0);
  }
  const int64_t bytes = rows * cols * static_cast<int64_t>(DTypeSize(dtype));
  if (bytes > capacity_[slot]) {
    // Grow with headroom so slowly increasing batch sizes do not reallocate each time.
    const int64_t want = std::max<int64_t>(bytes, capacity_[slot] * 5 / 4);
    buffers_[slot] = backend_->Allocate(DType::kF32, 1, (want + 3) / 4);
    capacity_[slot] = (want + 3) / 4 * 4;
  }
  Tensor t;
  t.data = buffers_[slot].t().data;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  return t;
}

namespace {
enum BatchSlots { kSlotIds = 1000, kSlotTypes, kSlotPositions, kSlotCu, kSlotRows, kSlotPrefixOf };
}

DeviceBatch Model::PrepareBatch(const ForwardBatch& batch, Workspace& ws) {
  DeviceBatch d;
  d.num_seqs = batch.num_seqs();
  d.max_seqlen = batch.max_seqlen;
  d.num_tokens = batch.num_tokens();
  d.host_cu_seqlens = batch.cu_seqlens;
  const int64_t T = d.num_tokens;
  std::vector<int32_t>& positions = scratch_positions_;
  positions.resize(T);
  for (int s = 0; s < d.num_seqs; ++s) {
    // A sequence with a prefix continues it: its own tokens start at the prefix's length.
    const int pre = batch.PrefixLength(s);
    const int32_t start = batch.cu_seqlens[s] - pre;
    for (int32_t i = batch.cu_seqlens[s]; i < batch.cu_seqlens[s + 1]; ++i) {
      positions[i] = i - start + position_offset();
    }
    d.max_context = std::max(d.max_context, batch.cu_seqlens[s + 1] - batch.cu_seqlens[s] + pre);
  }
  std::vector<int32_t>& types = scratch_types_;
  if (batch.token_type_ids.empty()) {
    types.assign(T, 0);
  } else {
    types = batch.token_type_ids;
  }
  d.ids = ws.Get(kSlotIds, DType::kI32, 1, T);
  d.type_ids = ws.Get(kSlotTypes, DType::kI32, 1, T);
  d.positions = ws.Get(kSlotPositions, DType::kI32, 1, T);
  d.cu_seqlens = ws.Get(kSlotCu, DType::kI32, 1, d.num_seqs + 1);
  backend_->CopyFromHost(batch.token_ids.data(), d.ids);
  backend_->CopyFromHost(types.data(), d.type_ids);
  backend_->CopyFromHost(positions.data(), d.positions);
  backend_->CopyFromHost(batch.cu_seqlens.data(), d.cu_seqlens);
  if (!batch.prefix_of.empty()) {
    d.prefix_of = ws.Get(kSlotPrefixOf, DType::kI32, 1, d.num_seqs);
    backend_->CopyFromHost(batch.prefix_of.data(), d.prefix_of);
  }
  return d;
}

void Model::SelectOutputRows(DeviceBatch& d, Workspace& ws, bool first) {
  std::vector<int32_t>& rows = scratch_rows_;
  rows.resize(d.num_seqs);
  for (int s = 0; s < d.num_seqs; ++s) {
    rows[s] = first ? d.host_cu_seqlens[s] : d.host_cu_seqlens[s + 1] - 1;
  }
  d.output_rows = ws.Get(kSlotRows, DType::kI32, 1, d.num_seqs);
  d.num_output_rows = d.num_seqs;
  backend_->CopyFromHost(rows.data(), d.output_rows);
}

Status Model::Validate(const ForwardBatch& batch) const {
  if (batch.num_seqs() == 0) return InvalidArgument("empty batch");
  const int S = batch.num_seqs();
  if (!batch.prefix_of.empty()) {
    if (!SupportsPrefixReuse()) return Internal("this model does not support prefix reuse");
    if (batch.prefix_of.size() != static_cast<size_t>(S)) {
      return Internal("prefix_of must have one entry per sequence");
    }
    for (int s = 0; s < S; ++s) {
      const int p = batch.prefix_of[s];
      if (p >= 0 && (p >= S || p == s || batch.prefix_of[p] >= 0)) {
        return Internal("sequence " + std::to_string(s) +
                        ": prefix_of must name another sequence that has no prefix itself");
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    const int len = batch.cu_seqlens[s + 1] - batch.cu_seqlens[s] + batch.PrefixLength(s);
    if (len <= 0) return InvalidArgument("sequence " + std::to_string(s) + " is empty");
    if (max_sequence_length() > 0 && len > max_sequence_length()) {
      return OutOfRange("sequence of " + std::to_string(len) + " tokens exceeds the model's " +
                        "limit of " + std::to_string(max_sequence_length()) + " tokens");
    }
  }
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return InvalidArgument("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                             std::to_string(config_.vocab_size) + ")");
    }
  }
  for (int32_t t : batch.token_type_ids) {
    if (t < 0 || t >= std::max(1, config_.type_vocab_size)) {
      return InvalidArgument("token type id " + std::to_string(t) + " outside [0, " +
                             std::to_string(std::max(1, config_.type_vocab_size)) + ")");
    }
  }
  return Status::Ok();
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
  else
    return false;
  return true;
}

namespace {

const std::vector<ArchitectureInfo>& Registry() {
  static const std::vector<ArchitectureInfo> kArchs = {
      {"BertModel", "bert", "", "none", Task::kEmbed},
      {"BertForSequenceClassification", "bert", "bert.", "bert_pooler_classifier", Task::kClassify},
      {"RobertaModel", "roberta", "", "none", Task::kEmbed},
      {"RobertaForSequenceClassification", "roberta", "roberta.", "roberta_classifier",
       Task::kClassify},
      {"XLMRobertaModel", "roberta", "", "none", Task::kEmbed},
      {"XLMRobertaForSequenceClassification", "roberta", "roberta.", "roberta_classifier",
       Task::kClassify},
      {"Qwen3Model", "qwen3", "", "none", Task::kEmbed},
      {"Qwen3ForSequenceClassification", "qwen3", "model.", "score_last", Task::kClassify},
      {"Qwen3ForCausalLM", "qwen3", "model.", "lm_yes_no", Task::kScore},
  };
  return kArchs;
}

}  // namespace

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> out;
  for (const auto& a : Registry()) out.push_back(a.name);
  return out;
}

StatusOr<ArchitectureInfo> LookupArchitecture(const ModelConfig& config) {
  for (const auto& a : Registry()) {
    if (a.name == config.architecture) return a;
  }
  std::string list;
  for (const auto& n : SupportedArchitectures()) list += (list.empty() ? "" : ", ") + n;
  if (config.architecture.empty()) {
    return Unsupported(config.dir +
                       "/config.json has no \"architectures\" entry; supported: " + list);
  }
  return Unsupported("architecture " + config.architecture +
                     " is not supported (supported: " + list + ")");
}

StatusOr<std::unique_ptr<Model>> CreateBertModel(const ModelConfig& config,
                                                 const WeightStore& weights, Backend* backend,
                                                 const ModelLoadOptions& options, bool roberta);
StatusOr<std::unique_ptr<Model>> CreateQwen3Model(const ModelConfig& config,
                                                  const WeightStore& weights, Backend* backend,
                                                  const ModelLoadOptions& options);

StatusOr<std::unique_ptr<Model>> CreateModel(const ArchitectureInfo& arch,
                                             const ModelConfig& config, const WeightStore& weights,
                                             Backend* backend, const ModelLoadOptions& options) {
  if (arch.family == "bert") return CreateBertModel(config, weights, backend, options, false);
  if (arch.family == "roberta") return CreateBertModel(config, weights, backend, options, true);
  if (arch.family == "qwen3") return CreateQwen3Model(config, weights, backend, options);
  return Internal("no model factory for family " + arch.family);
}

}  // namespace sluice
