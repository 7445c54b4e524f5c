// Scheduler: packs sequences of queued requests into batches under a token budget and
// a sequence cap (no padding: a batch's cost is its token count).
//
// Policy, FIFO over requests:
//  - a request whose remaining sequences fit the rest of the batch is taken whole;
//  - one that does not fit, while the batch is less than half full (or empty), is split:
//    its first sequences fill the batch and the rest go first in the next batch (large
//    candidate lists are spread over batches transparently);
//  - otherwise the batch closes, so that the request starts the next batch together;
//  - a single sequence longer than the token budget runs alone;
//  - cancelled or expired requests are dropped before any more of their sequences run.
//
// Not thread-safe: the EngineLoop calls it under its mutex.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "engine/request.h"

namespace sluice {

struct SchedulerLimits {
  int64_t max_batch_tokens = 8192;
  int max_num_seqs = 256;
};

struct BatchItem {
  std::shared_ptr<EngineRequest> request;
  uint32_t seq = 0;  // index into request->inputs
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerLimits limits) : limits_(limits) {}

  // Queues a request (its `unfinished` is set to its sequence count).
  void Add(std::shared_ptr<EngineRequest> request);
  // Requests with sequences not yet scheduled.
  size_t queued() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  // Tokens and sequences queued and not yet scheduled (cancelled requests count until
  // NextBatch drops them).
  int64_t queued_tokens() const { return queued_tokens_; }
  int64_t queued_seqs() const { return queued_seqs_; }
  // True when the queue holds at least one full batch (by tokens or sequences).
  bool full_batch_queued() const {
    return queued_tokens_ >= limits_.max_batch_tokens || queued_seqs_ >= limits_.max_num_seqs;
  }

  // Fills `batch` (cleared first) with the next batch. Requests dropped because they were
  // cancelled or expired, and that have nothing left in flight, are appended to
  // `finished` with `failure` set; their sink.on_done is the caller's to call.
  void NextBatch(SteadyClock::time_point now, std::vector<BatchItem>* batch,
                 std::vector<std::shared_ptr<EngineRequest>>* finished);

  // Removes every queued request (for shutdown); those with nothing in flight are
  // appended to `finished` with `failure` = status.
  void DropAll(const Status& status, std::vector<std::shared_ptr<EngineRequest>>* finished);

 private:
  // NextBatch without the queued-work accounting.
  void Fill(SteadyClock::time_point now, std::vector<BatchItem>* batch,
            std::vector<std::shared_ptr<EngineRequest>>* finished);
  // Drops the unscheduled part of `r`; true if `r` is now finished.
  bool DropRest(EngineRequest& r, const Status& status);

  SchedulerLimits limits_;
  std::deque<std::shared_ptr<EngineRequest>> queue_;
  int64_t queued_tokens_ = 0;
  int64_t queued_seqs_ = 0;
};

}  // namespace sluice
