// WaitClock adds each bracketed wait to its own total, on the accelerator's clock (the host's on CPU).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "zero/wall_clock.h"

namespace deepspeed::zero {
namespace {

TEST(WaitClock, EachSpanLandsInItsOwnTotal) {
  WaitClock clock;
  double a = 0, b = 0;
  // Each span lies inside an interval of the host clock read around it: its total is positive (it saw the sleep)
  // and no larger than that interval (it was added once, and to this total only). Orderings, not speeds.
  const auto outer_a = std::chrono::steady_clock::now();
  auto first = clock.begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  clock.end(std::move(first), &a);
  clock.resolve();
  const double outer_a_ms = ms_since(outer_a);
  EXPECT_GT(a, 0.0) << "the span was not added to its total";
  EXPECT_LE(a, outer_a_ms) << "the span was counted more than once";
  const double first_total = a;
  const auto outer_b = std::chrono::steady_clock::now();
  auto second = clock.begin();
  clock.end(std::move(second), &b);
  clock.resolve();
  EXPECT_EQ(a, first_total) << "the second span went to its own total";
  EXPECT_LE(b, ms_since(outer_b));
  const double settled_b = b;
  clock.resolve();  // nothing left pending: totals do not grow again
  EXPECT_EQ(a, first_total);
  EXPECT_EQ(b, settled_b);
}

}  // namespace
}  // namespace deepspeed::zero
