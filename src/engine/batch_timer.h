// BatchTimer: when the serving loop forms its next batch (batch coalescing).
//
// While batches are running, the next one need not be formed at once: formed shortly
// before the running ones are expected to finish, it also takes the requests that arrive
// meanwhile, instead of leaving them for the batch after it. In a closed loop (clients
// that send their next request when the previous one is answered) forming at once splits
// the clients into many small batches; coalescing keeps them in few large ones while the
// device stays busy, since the next batch is still queued before the device runs dry.
//
// The expected finish comes from the measured device seconds per computed token (an
// exponential average over completed batches) and the work of the batches in flight. The
// next batch is formed `margin` before that: the larger of kMinMarginSeconds and
// kMarginFraction of the in-flight estimate, which covers host preparation and estimation
// error (batches of other sizes run at other rates); an underestimate only forms it
// earlier. At once when nothing is in flight, before the first measurement, or when a
// full batch is already queued (waiting would not make it larger).
//
// Not thread-safe: the EngineLoop calls it under its mutex.
#pragma once

#include <cstdint>

#include "engine/request.h"

namespace sluice {

class BatchTimer {
 public:
  using TimePoint = SteadyClock::time_point;
  static constexpr double kMinMarginSeconds = 0.002;
  static constexpr double kMarginFraction = 0.25;
  static constexpr double kSmoothing = 0.3;  // weight of the newest sample

  explicit BatchTimer(bool enabled = true) : enabled_(enabled) {}

  // A batch of `work` tokens to compute was submitted at `now`. Returns its estimated
  // device time in seconds (0 before the first measurement), to pass back below.
  double OnSubmit(int64_t work, TimePoint now);
  // Forgets a submitted batch (its Submit failed, or it is re-submitted with its work
  // corrected).
  void Withdraw(double estimate);
  // A batch finished: `submitted` as given to OnSubmit, `done` when its results were
  // back. `exact`: the caller was waiting for it, so `done` is when it finished (not
  // later); only exact completions are measured.
  void OnComplete(double estimate, int64_t work, TimePoint submitted, TimePoint done, bool exact);

  // When the next batch should be formed: TimePoint::min() for at once.
  TimePoint FormAt(bool full_batch_queued) const;

  double seconds_per_token() const { return sec_per_token_; }
  int in_flight() const { return in_flight_; }

 private:
  bool enabled_;
  int in_flight_ = 0;
  double in_flight_estimate_ = 0;  // seconds of work submitted and not finished
  double sec_per_token_ = 0;       // 0: no measurement yet
  TimePoint busy_until_{};         // expected finish of the work in flight
  TimePoint last_done_{};          // the latest completion
};

}  // namespace sluice
