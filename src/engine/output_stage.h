// Output stages: what turns a forward's hidden states into results. The pooler
// (engine/pooler.h) pools and applies a head for scoring and embedding; the sampler
// (engine/sampler.h) computes logits and picks tokens for generation. Both sit behind the
// same two steps around a ModelRunner forward, in a pipeline of up to kMaxSlots batches:
//
//   Enqueue(batch, forward, slot)  queue the device part and the copy of its results into
//                                  the slot's host memory (before the slot's fence)
//   Complete...(slot, ...)         after the fence: the host part, writing the results
//                                  (typed per stage)
#pragma once

#include "engine/model_runner.h"

namespace sluice {

class OutputStage {
 public:
  static constexpr int kMaxSlots = 2;
  virtual ~OutputStage() = default;
  // The rows the forward must return (Model::PackInputs' output rows).
  virtual OutputRows rows() const = 0;
  virtual Status Enqueue(const ForwardBatch& batch, const RunnerForward& forward, int slot) = 0;
};

}  // namespace sluice
