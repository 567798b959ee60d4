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
  auto first = clock.begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  clock.end(std::move(first), &a);
  clock.resolve();
  EXPECT_GE(a, 19.0) << "the span covers the sleep (a lower bound only: sleep_for waits at least that long)";
  const double first_total = a;
  auto second = clock.begin();
  clock.end(std::move(second), &b);
  clock.resolve();
  EXPECT_EQ(a, first_total) << "the second span went to its own total";
  EXPECT_GE(b, 0.0);
  const double settled_b = b;
  clock.resolve();  // nothing left pending: totals do not grow again
  EXPECT_EQ(a, first_total);
  EXPECT_EQ(b, settled_b);
}

}  // namespace
}  // namespace deepspeed::zero
