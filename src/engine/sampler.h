// The sampler: the output stage of generation. On the device it computes full-vocabulary
// logits of the rows the step samples from (Model::Logits) and picks one token per row
// (Backend::Sample: penalties, temperature, top_k/top_p/min_p, seeded draws, logprobs);
// only the SampledToken rows come back to the host.
#pragma once

#include <vector>

#include "engine/output_stage.h"

namespace sluice {

class Sampler final : public OutputStage {
 public:
  explicit Sampler(ModelRunner* runner) : runner_(runner) {}

  // The step's rows (one per output row of the forward, in order) and their adjustments;
  // filled by the engine before Enqueue.
  std::vector<SamplingRow>& sampling_rows() { return rows_; }
  std::vector<SamplingAdjust>& adjusts() { return adjusts_; }
  // Token bitmasks of the rows that have one (SamplingRow::mask_row): room for num_masks masks
  // of `words` words each in the slot's pinned staging, written by the caller before Enqueue
  // (0 masks: none). The pointer is valid until the next PrepareMasks.
  uint32_t* PrepareMasks(int num_masks, int words, int slot);
  // Room for `capacity` token ids of sparse allow-lists (SamplingRow::allowed_begin) in the
  // slot's pinned staging; valid until the next PrepareAllowed.
  int32_t* PrepareAllowed(int capacity, int slot);
  // How many masks (of those prepared) and ids the caller wrote: what Enqueue passes on
  // (after PrepareMasks, every prepared mask).
  void SetFilled(int num_masks, int num_allowed) {
    num_masks_ = num_masks;
    num_allowed_ = num_allowed;
  }
  // Starts the upload of the filled masks and allow-lists (after SetFilled) beside the
  // forward, so that Enqueue's sample does not wait for them (Backend::StageSampleInputs).
  void StageMasks(int slot);
  int num_masks() const { return num_masks_; }
  int num_allowed() const { return num_allowed_; }
  int mask_words() const { return mask_words_; }

  OutputRows rows() const override { return OutputRows::kNone; }  // explicit output rows
  Status Enqueue(const ForwardBatch& batch, const RunnerForward& forward, int slot) override;
  // After the slot's fence: one result per row.
  const SampledToken* results(int slot) const { return slots_[slot].out.as<SampledToken>(); }

 private:
  struct Slot {
    HostBuffer rows, adjusts, out, masks, allowed;  // pinned staging
  };
  // The filled masks and allow-lists of slot s into p.
  void SetMasks(const Slot& s, SampleParams* p) const;
  ModelRunner* runner_;
  std::vector<SamplingRow> rows_;
  std::vector<SamplingAdjust> adjusts_;
  int num_masks_ = 0;
  int mask_words_ = 0;
  int num_allowed_ = 0;
  Slot slots_[kMaxSlots];
};

}  // namespace sluice
