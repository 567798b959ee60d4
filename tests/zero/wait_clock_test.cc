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
  auto second = clock.begin();
  clock.end(std::move(second), &b);
  clock.resolve();
  EXPECT_GE(a, 19.0);
  EXPECT_LT(a, 20000.0);
  EXPECT_GE(b, 0.0);
  EXPECT_LT(b, a) << "an empty span is shorter than a slept one";
  clock.resolve();  // nothing left pending: totals do not grow again
  EXPECT_GE(a, 19.0);
  const double settled = a;
  clock.resolve();
  EXPECT_EQ(a, settled);
}

}  // namespace
}  // namespace deepspeed::zero
