// Hang diagnosis end to end: a rank that calls a different collective (check mode) and a rank that
// skips one (timeout), asserting each rank's exception type and message. Each case runs as its own
// dist test, selected with --gtest_filter, because a group that failed a collective is not
// reusable.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <iostream>

#include "deepspeed/comm.h"

namespace dc = deepspeed::comm;
using std::chrono::milliseconds;

namespace {

// Two collectives every rank agrees on, so the failing one is #3.
void warm_up(dc::ProcessGroup& world) {
  at::Tensor x = at::ones({4});
  world.all_reduce(x);
  world.barrier();
}

// Check mode comes from the environment (DS_COMM_CHECK=1 in the test registration). The last rank
// calls broadcast where the others call all_reduce; every rank must throw the same CommError naming
// it.
TEST(CommHang, DivergedCollectiveNamesTheRank) {
  dc::init_distributed();
  dc::ProcessGroup world = dc::get_world_group();
  int r = world.rank(), n = world.size();
  ASSERT_GE(n, 2);
  warm_up(world);
  at::Tensor x = at::ones({1024});
  std::string want =
      "collective #3 diverged on group world: rank 0 called all_reduce(float[1024]), rank " +
      std::to_string(n - 1) + " called broadcast(float[1024], src=0)";
  try {
    if (r == n - 1) {
      world.broadcast(x, 0);
    } else {
      world.all_reduce(x);
    }
    FAIL() << "rank " << r << ": expected CommError";
  } catch (const deepspeed::CommTimeoutError& e) {
    FAIL() << "rank " << r << ": expected a divergence, got a timeout: " << e.what();
  } catch (const deepspeed::CommError& e) {
    std::cout << "rank " << r << " caught: " << e.what() << std::endl;
    EXPECT_EQ(std::string(e.what()), want);
  }
  // Nothing ran on the wire, so the world is still usable.
  world.all_reduce(x);
  EXPECT_TRUE(at::equal(x, at::full({1024}, n, at::kFloat))) << "a sum of ones is exact";
  dc::destroy_process_group();
}

// Rank 1 skips collective #3 (timeout from DS_COMM_TIMEOUT=2). A side group with a long timeout
// keeps rank 1 waiting until rank 0 has seen its timeout, instead of sleeping.
void skip_case(bool check_mode) {
  dc::InitOptions opts;
  opts.check_collectives = check_mode;
  dc::init_distributed(opts);
  dc::ProcessGroup world = dc::get_world_group();
  int r = world.rank();
  ASSERT_EQ(world.size(), 2);
  dc::ProcessGroup side = dc::new_group({0, 1}, milliseconds(60000));
  warm_up(world);
  if (r == 0) {
    at::Tensor x = at::ones({4});
    std::string msg;
    try {
      world.all_reduce(x);
      FAIL() << "expected CommTimeoutError";
    } catch (const deepspeed::CommTimeoutError& e) {
      msg = e.what();
    }
    std::cout << "rank 0 caught: " << msg << std::endl;
    EXPECT_NE(
        msg.find("rank 0 timed out after 2s in collective #3 all_reduce(float[4]) on group world"),
        std::string::npos)
        << msg;
    if (check_mode) {
      EXPECT_NE(msg.find("rank(s) 1 did not reach it"), std::string::npos) << msg;
    }
  }
  side.barrier();  // rank 1 arrives at once, rank 0 after its timeout
}

TEST(CommHang, SkippedCollectiveTimesOut) { skip_case(false); }
TEST(CommHang, SkippedCollectiveTimesOutInCheckMode) { skip_case(true); }

// A peer that exits without taking part: the survivor gets a CommTimeoutError, not a hang.
TEST(CommHang, DeadPeerIsAnErrorNotAHang) {
  dc::init_distributed();
  dc::ProcessGroup world = dc::get_world_group();
  ASSERT_EQ(world.size(), 2);
  warm_up(world);
  if (world.rank() == 1) {
    std::_Exit(0);  // dies without a goodbye, as a crashed rank would
  }
  at::Tensor x = at::ones({4});
  std::string msg;
  try {
    world.all_reduce(x);
    FAIL() << "expected CommTimeoutError";
  } catch (const deepspeed::CommTimeoutError& e) {
    msg = e.what();
  }
  std::cout << "rank 0 caught: " << msg << std::endl;
  EXPECT_NE(msg.find("in collective #3 all_reduce(float[4]) on group world"), std::string::npos)
      << msg;
  EXPECT_THROW(world.all_reduce(x), deepspeed::CommError);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  // A failed group may hold Gloo threads blocked on a dead peer; leave without tearing it down.
  std::fflush(stdout);
  std::_Exit(rc);
}
