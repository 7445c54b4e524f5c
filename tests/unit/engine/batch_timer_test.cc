// BatchTimer: the coalescing decision from measured device time, on synthetic clocks.
#include "engine/batch_timer.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

using std::chrono::milliseconds;
const SteadyClock::time_point t0 = SteadyClock::time_point{} + std::chrono::hours(1);
const auto kNow = SteadyClock::time_point::min();

double Ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

TEST(BatchTimer, FormsAtOnceUntilMeasuredOrWhenIdle) {
  BatchTimer t;
  EXPECT_EQ(t.FormAt(false), kNow);  // nothing in flight
  const double e = t.OnSubmit(1000, t0);
  EXPECT_EQ(e, 0.0);                 // no measurement yet
  EXPECT_EQ(t.FormAt(false), kNow);  // so no waiting
  t.OnComplete(e, 1000, t0, t0 + milliseconds(40), true);
  EXPECT_NEAR(t.seconds_per_token(), 40e-6, 1e-12);
  EXPECT_EQ(t.FormAt(false), kNow);  // idle again
}

TEST(BatchTimer, WaitsUntilMarginBeforeExpectedFinish) {
  BatchTimer t;
  t.OnComplete(t.OnSubmit(1000, t0), 1000, t0, t0 + milliseconds(40), true);  // 40 us/token
  const auto s = t0 + milliseconds(100);
  const double e = t.OnSubmit(2000, s);  // expected 80 ms
  EXPECT_NEAR(e, 0.080, 1e-9);
  // Margin: 25% of the 80 ms in flight = 20 ms, so form at s + 60 ms.
  EXPECT_NEAR(Ms(t.FormAt(false) - s), 60.0, 1e-6);
  // A full batch queued: waiting cannot make it larger.
  EXPECT_EQ(t.FormAt(true), kNow);
  // A second batch queued behind the first: the device is busy until s + 80 + 40 ms.
  const double e2 = t.OnSubmit(1000, s + milliseconds(1));
  EXPECT_NEAR(Ms(t.FormAt(false) - s), 120.0 - 0.25 * 120.0, 1e-6);
  // The first finishes early (70 ms): the expectation moves to the second's 40 ms from then.
  t.OnComplete(e, 2000, s, s + milliseconds(70), true);
  EXPECT_NEAR(Ms(t.FormAt(false) - s), 70.0 + 40.0 - 10.0, 1e-6);
  EXPECT_EQ(t.in_flight(), 1);
  t.OnComplete(e2, 1000, s + milliseconds(1), s + milliseconds(105), true);
  EXPECT_EQ(t.FormAt(false), kNow);
}

TEST(BatchTimer, MeasuresFromThePreviousCompletionAndOnlyExactOnes) {
  BatchTimer t;
  t.OnComplete(t.OnSubmit(1000, t0), 1000, t0, t0 + milliseconds(10), true);  // 10 us/token
  // Submitted at t0 + 20 behind a batch that finishes at t0 + 50: its device time starts
  // there, 30 ms for 1000 tokens -> sample 30 us/token, averaged with weight 0.3.
  const auto s = t0 + milliseconds(20);
  const double a = t.OnSubmit(1000, s), b = t.OnSubmit(1000, s);
  t.OnComplete(a, 1000, s, t0 + milliseconds(50), false);  // not exact: not measured
  EXPECT_NEAR(t.seconds_per_token(), 10e-6, 1e-12);
  t.OnComplete(b, 1000, s, t0 + milliseconds(80), true);
  EXPECT_NEAR(t.seconds_per_token(), 0.7 * 10e-6 + 0.3 * 30e-6, 1e-12);
}

TEST(BatchTimer, MinimumMarginAndFailedSubmits) {
  BatchTimer t;
  t.OnComplete(t.OnSubmit(1000, t0), 1000, t0, t0 + milliseconds(1), true);  // 1 us/token
  const auto s = t0 + milliseconds(10);
  const double e = t.OnSubmit(4000, s);  // 4 ms: 25% is 1 ms, under the 2 ms minimum
  EXPECT_NEAR(Ms(t.FormAt(false) - s), 2.0, 1e-6);
  const double f = t.OnSubmit(4000, s);
  t.Withdraw(f);  // forgotten
  EXPECT_NEAR(Ms(t.FormAt(false) - s), 2.0, 1e-6);
  EXPECT_EQ(t.in_flight(), 1);
  t.OnComplete(e, 4000, s, s + milliseconds(4), true);
  EXPECT_EQ(t.FormAt(false), kNow);
}

TEST(BatchTimer, DisabledAlwaysFormsAtOnce) {
  BatchTimer t(false);
  t.OnComplete(t.OnSubmit(1000, t0), 1000, t0, t0 + milliseconds(40), true);
  t.OnSubmit(1000, t0 + milliseconds(50));
  EXPECT_EQ(t.FormAt(false), kNow);
}

}  // namespace
}  // namespace sluice
