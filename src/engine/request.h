// One unit of work submitted to an EngineLoop: the sequences of one API request.
//
// The submitter fills `inputs`, optionally `deadline`, and `on_done`; the loop fills
// `outputs` (input order) and the timestamps, then calls on_done exactly once, on one of
// the loop's threads, without holding any loop lock. on_done must be cheap (hand the
// request to a worker pool); it may call back into the loop (e.g. Submit).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

#include "engine/engine.h"

namespace sluice {

using SteadyClock = std::chrono::steady_clock;

struct EngineRequest {
  std::vector<SequenceInput> inputs;
  std::vector<SequenceOutput> outputs;  // filled by the loop, input order
  SteadyClock::time_point deadline = SteadyClock::time_point::max();
  // Set (from any thread) through EngineLoop::Cancel; unscheduled sequences are dropped.
  std::atomic<bool> cancelled{false};
  std::function<void(EngineRequest&, const Status&)> on_done;

  // Filled by the loop.
  SteadyClock::time_point enqueued{}, started{}, finished{};  // started: first batch ran
  double compute_seconds = 0;  // sum of the forwards this request took part in
  int batches = 0;             // forwards this request's sequences were spread over

  // Loop-internal bookkeeping (guarded by the loop's mutex).
  size_t next = 0;        // next sequence to schedule
  size_t unfinished = 0;  // sequences scheduled or queued, not yet delivered
  bool failed = false;    // a batch holding one of its sequences failed
  Status failure;
  int64_t total_tokens = 0;
};

}  // namespace sluice
