// Stage 3's fetch-order trace (zero/stage3/prefetch_coordinator.h): recorded on one pass, predicted on the next,
// dropped at a divergence; a forward fetch asking within the forward sees nothing of the backward.
#include "zero/stage3/prefetch_coordinator.h"

#include <gtest/gtest.h>

#include <vector>

namespace dz = deepspeed::zero;

namespace {

// One training pass: forward fetches units 0, 1, 2, backward fetches 2, 1, 0.
void run_pass(dz::PrefetchCoordinator& c, bool backward = true) {
  c.begin_pass();
  for (int id : {0, 1, 2}) c.on_fetch(id);
  if (backward) {
    c.begin_backward();
    for (int id : {2, 1, 0}) c.on_fetch(id);
  }
  c.end_pass();
}

}  // namespace

TEST(PrefetchCoordinator, PredictsTheRecordedOrderFromTheSecondPass) {
  dz::PrefetchCoordinator c;
  c.begin_pass();
  EXPECT_FALSE(c.following());  // nothing recorded yet
  c.end_pass();
  run_pass(c);
  c.begin_pass();
  ASSERT_TRUE(c.following());
  EXPECT_TRUE(c.on_fetch(0));
  EXPECT_EQ(c.upcoming(2), (std::vector<int>{1, 2}));
  EXPECT_EQ(c.upcoming(10), (std::vector<int>{1, 2, 2, 1, 0}));
}

// The backward's first units are not gathered during the forward (they would be held through the loss's
// activation peak): within the forward, prediction stops at its last fetch; from the backward on, it runs to the
// end of the trace.
TEST(PrefetchCoordinator, WithinTheForwardStopsAtTheBackward) {
  dz::PrefetchCoordinator c;
  run_pass(c);
  c.begin_pass();
  c.on_fetch(0);
  EXPECT_EQ(c.upcoming(10, /*within_forward=*/true), (std::vector<int>{1, 2}));
  c.on_fetch(1);
  c.on_fetch(2);
  EXPECT_TRUE(c.upcoming(10, /*within_forward=*/true).empty());
  EXPECT_EQ(c.upcoming(10), (std::vector<int>{2, 1, 0}));
  c.begin_backward();
  c.on_fetch(2);
  EXPECT_EQ(c.upcoming(10, /*within_forward=*/true), (std::vector<int>{1, 0}));

  // A forward-only pass (evaluation) has no backward: the whole trace is the forward.
  dz::PrefetchCoordinator eval;
  run_pass(eval, /*backward=*/false);
  eval.begin_pass();
  eval.on_fetch(0);
  EXPECT_EQ(eval.upcoming(10, /*within_forward=*/true), (std::vector<int>{1, 2}));
}

TEST(PrefetchCoordinator, ADivergentFetchStopsPredictingAndIsRecorded) {
  dz::PrefetchCoordinator c;
  run_pass(c);
  c.begin_pass();
  EXPECT_TRUE(c.on_fetch(0));
  EXPECT_FALSE(c.on_fetch(2));  // the trace says 1
  EXPECT_FALSE(c.following());
  EXPECT_TRUE(c.upcoming(10).empty());
  EXPECT_EQ(c.invalidations(), 1);
  c.on_fetch(1);
  c.end_pass();
  c.begin_pass();
  c.on_fetch(0);
  EXPECT_EQ(c.upcoming(10), (std::vector<int>{2, 1}));
}
