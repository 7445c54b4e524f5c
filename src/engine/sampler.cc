#include "engine/sampler.h"

#include <algorithm>
#include <cstring>

namespace sluice {

namespace {
constexpr int kSlotLogits = 2100;  // workspace slot (models: small numbers, pooler 2000+)

void Fit(Backend& backend, HostBuffer* b, size_t bytes) {
  if (b->size() < bytes) *b = backend.AllocateHost(std::max<size_t>(bytes + bytes / 4, 256));
}
}  // namespace

uint32_t* Sampler::PrepareMasks(int num_masks, int words, int slot) {
  num_masks_ = num_masks;
  mask_words_ = words;
  num_allowed_ = 0;
  if (num_masks == 0) return nullptr;
  Slot& s = slots_[slot];
  Fit(runner_->backend(), &s.masks,
      sizeof(uint32_t) * static_cast<size_t>(num_masks) * static_cast<size_t>(words));
  return s.masks.as<uint32_t>();
}

int32_t* Sampler::PrepareAllowed(int capacity, int slot) {
  num_allowed_ = 0;
  if (capacity == 0) return nullptr;
  Slot& s = slots_[slot];
  Fit(runner_->backend(), &s.allowed, sizeof(int32_t) * static_cast<size_t>(capacity));
  return s.allowed.as<int32_t>();
}

void Sampler::StageMasks(int slot) {
  if (num_masks_ == 0 && num_allowed_ == 0) return;
  SampleParams p;
  SetMasks(slots_[slot], &p);
  runner_->backend().StageSampleInputs(p);
}

void Sampler::SetMasks(const Slot& s, SampleParams* p) const {
  if (num_masks_ > 0) {
    p->masks = s.masks.as<uint32_t>();
    p->mask_words = mask_words_;
    p->num_masks = num_masks_;
  }
  if (num_allowed_ > 0) {
    p->allowed = s.allowed.as<int32_t>();
    p->num_allowed = num_allowed_;
  }
}

Status Sampler::Enqueue(const ForwardBatch& batch, const RunnerForward& f, int index) {
  (void)batch;
  const int n = static_cast<int>(rows_.size());
  // A step of prompt chunks only samples nothing (the forward, asked for no rows, returns
  // every token's).
  if (n == 0) return Status::Ok();
  if (n != f.hidden.rows) {
    return Internal("sampler: " + std::to_string(n) + " sampling rows for " +
                    std::to_string(f.hidden.rows) + " output rows");
  }
  Backend& backend = runner_->backend();
  Model& model = runner_->model();
  Tensor logits = runner_->workspace().Get(kSlotLogits, DType::kF32, n, model.config().vocab_size);
  RETURN_IF_ERROR(model.Logits(f.hidden, logits));
  Slot& s = slots_[index];
  Fit(backend, &s.rows, sizeof(SamplingRow) * n);
  Fit(backend, &s.adjusts, sizeof(SamplingAdjust) * std::max<size_t>(1, adjusts_.size()));
  Fit(backend, &s.out, sizeof(SampledToken) * n);
  std::memcpy(s.rows.data(), rows_.data(), sizeof(SamplingRow) * n);
  if (!adjusts_.empty()) {
    std::memcpy(s.adjusts.data(), adjusts_.data(), sizeof(SamplingAdjust) * adjusts_.size());
  }
  SampleParams p;
  p.logits = logits;
  p.num_rows = n;
  p.rows = s.rows.as<SamplingRow>();
  p.adjusts = s.adjusts.as<SamplingAdjust>();
  p.num_adjusts = static_cast<int>(adjusts_.size());
  for (const SamplingRow& r : rows_) p.max_logprobs = std::max(p.max_logprobs, r.num_logprobs);
  p.out = s.out.as<SampledToken>();
  SetMasks(s, &p);  // (the pointers StageMasks staged, so the staged copies are used)
  backend.Sample(p);
  return Status::Ok();
}

}  // namespace sluice
