// The pooler: the output stage of scoring and embedding models. On the device it pools the
// hidden states (CLS/LAST rows, MEAN/MAX reductions; ALL/STEP keep token rows) and runs the
// head's first matrix product; on the host the rest of the head (HeadRunner).
#pragma once

#include <memory>
#include <vector>

#include "engine/output_stage.h"
#include "pooling/head.h"

namespace sluice {

class Pooler final : public OutputStage {
 public:
  // `runner` must outlive the pooler.
  static StatusOr<std::unique_ptr<Pooler>> Create(ModelRunner* runner, HeadSpec head);

  const HeadSpec& head() const { return head_; }
  bool token_level() const {
    return head_.pooling == PoolingKind::kAll || head_.pooling == PoolingKind::kStep;
  }
  OutputRows rows() const override;
  Status Enqueue(const ForwardBatch& batch, const RunnerForward& forward, int slot) override;
  // After the slot's fence: writes one output per input sequence. `packed_index` maps input
  // sequence i to its packed sequence (shared-prefix groups add prefix sequences whose rows
  // are dropped); empty = the identity.
  void Complete(int slot, const std::vector<int>& packed_index, PooledOutput* outputs);

 private:
  struct Slot {
    HostBuffer results;   // f32 rows copied back
    int rows = 0;         // result rows (pooled rows, or tokens for ALL/STEP)
    int width = 0;        // values per result row
    int first_layer = 0;  // head layers already applied on the device
    std::vector<int32_t> cu_seqlens, token_ids;  // ALL/STEP pooling: the batch's layout
    std::vector<float> gathered;                 // shared-prefix groups: rows in input order
  };
  Pooler(ModelRunner* runner, HeadSpec head) : runner_(runner), head_(std::move(head)) {}

  ModelRunner* runner_;
  HeadSpec head_;
  // The head's first dense layer (e.g. BERT's pooler) as a device GEMM over the pooled
  // rows; its activation and the rest of the head run on the host.
  std::unique_ptr<LinearWeight> head_dense_;
  // Token-level heads (token classification, a late-interaction projection): every layer on
  // the device over all token rows (its activation where the device has it, its LayerNorm).
  struct TokenLayer {
    std::unique_ptr<LinearWeight> linear;
    Activation act = Activation::kNone;
    Buffer norm_weight, norm_bias;
    float norm_eps = 1e-5f;
  };
  std::vector<TokenLayer> token_layers_;
  Slot slots_[kMaxSlots];
};

}  // namespace sluice
