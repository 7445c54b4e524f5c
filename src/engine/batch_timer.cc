#include "engine/batch_timer.h"

#include <algorithm>
#include <chrono>

namespace sluice {
namespace {

SteadyClock::duration Seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

double BatchTimer::OnSubmit(int64_t work, TimePoint now) {
  const double est = sec_per_token_ * static_cast<double>(std::max<int64_t>(work, 0));
  busy_until_ = std::max(now, busy_until_) + Seconds(est);
  in_flight_estimate_ += est;
  ++in_flight_;
  return est;
}

void BatchTimer::Withdraw(double estimate) {
  busy_until_ -= Seconds(estimate);
  in_flight_estimate_ = std::max(0.0, in_flight_estimate_ - estimate);
  in_flight_ = std::max(0, in_flight_ - 1);
}

void BatchTimer::OnComplete(double estimate, int64_t work, TimePoint submitted, TimePoint done,
                            bool exact) {
  in_flight_ = std::max(0, in_flight_ - 1);
  in_flight_estimate_ = in_flight_ == 0 ? 0.0 : std::max(0.0, in_flight_estimate_ - estimate);
  if (exact && work > 0) {
    // The device started this batch when it was submitted or when the one before it
    // finished, whichever was later.
    const double secs =
        std::chrono::duration<double>(done - std::max(submitted, last_done_)).count();
    if (secs > 0) {
      const double sample = secs / static_cast<double>(work);
      sec_per_token_ =
          sec_per_token_ > 0 ? (1 - kSmoothing) * sec_per_token_ + kSmoothing * sample : sample;
    }
  }
  last_done_ = std::max(last_done_, done);
  busy_until_ = done + Seconds(in_flight_estimate_);
}

BatchTimer::TimePoint BatchTimer::FormAt(bool full_batch_queued) const {
  if (!enabled_ || in_flight_ == 0 || sec_per_token_ <= 0 || full_batch_queued) {
    return TimePoint::min();
  }
  const double margin = std::max(kMinMarginSeconds, kMarginFraction * in_flight_estimate_);
  return busy_until_ - Seconds(margin);
}

}  // namespace sluice
