// One unit of work submitted to an EngineLoop: the sequences of one API request.
//
// The submitter fills `inputs`, optionally `deadline`, and its `sink`; the loop fills
// `outputs` (input order) and the timestamps, and reports through the sink (ResponseSink).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

#include "engine/engine.h"

namespace sluice {

using SteadyClock = std::chrono::steady_clock;

// Where a request's results go. `on_output` (optional) may run many times, each time more
// of the request's outputs are ready (generation: new tokens of its sequences); `on_done`
// runs exactly once, after the last on_output, with the request's final status. Both run
// on one of the engine's threads without holding any of its locks, and must be cheap (hand
// the request to a worker pool); they may call back into the engine (e.g. Submit).
template <typename Request>
struct ResponseSink {
  std::function<void(Request&)> on_output;
  std::function<void(Request&, const Status&)> on_done;
};

struct EngineRequest {
  std::vector<TokenSequence> inputs;
  std::vector<PooledOutput> outputs;  // filled by the loop, input order
  SteadyClock::time_point deadline = SteadyClock::time_point::max();
  // Set (from any thread) through EngineLoop::Cancel; unscheduled sequences are dropped.
  std::atomic<bool> cancelled{false};
  // Pooling requests get every output at once, with on_done (on_output is not called).
  ResponseSink<EngineRequest> sink;

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
