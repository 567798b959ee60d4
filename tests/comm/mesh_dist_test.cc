// Process groups from the rank grid (comm/mesh.h) on real ranks: every group holds the ranks its lists name (an
// all-reduce of the global ranks sums them), a group asked for twice is made once and shared, the same ranks under
// another name are a communicator of their own, a grid of three axes groups along any set of them, and a size that
// does not divide the world is refused by name on every rank before any group is made.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mesh.h"
#include "deepspeed/comm.h"
#include "deepspeed/error.h"

namespace {

namespace comm = deepspeed::comm;

class MeshTest : public ::testing::Test {};

// The sum of the global ranks in `group`, by an all-reduce over it.
int64_t rank_sum(comm::ProcessGroup& group) {
  at::Tensor t = at::full({1}, comm::get_rank(), at::kLong);
  group.all_reduce(t);
  return t.item<int64_t>();
}

int64_t sum(const std::vector<int>& ranks) {
  int64_t s = 0;
  for (int r : ranks) s += r;
  return s;
}

TEST_F(MeshTest, GridGroupsHoldTheirRanksAndAreShared) {
  const int n = comm::get_world_size(), me = comm::get_rank();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even world";
  comm::GridGroups g = comm::grid_groups("test.grid", "test inner size", 2);
  ASSERT_TRUE(g.inner.is_member());
  ASSERT_TRUE(g.outer.is_member());
  EXPECT_EQ(g.inner.ranks(), (std::vector<int>{me - me % 2, me - me % 2 + 1}));
  std::vector<int> outer;
  for (int r = me % 2; r < n; r += 2) outer.push_back(r);
  EXPECT_EQ(g.outer.ranks(), outer);
  EXPECT_EQ(rank_sum(g.inner), sum(g.inner.ranks()));
  EXPECT_EQ(rank_sum(g.outer), sum(outer));
  // Asked again: the same communicators, not new ones (no collective either: a rank that made new groups here would
  // hang the others). Another name: a communicator of its own over the same ranks.
  comm::GridGroups again = comm::grid_groups("test.grid", "test inner size", 2);
  EXPECT_EQ(again.inner.name(), g.inner.name());
  EXPECT_EQ(again.outer.name(), g.outer.name());
  comm::GridGroups other = comm::grid_groups("test.other", "test inner size", 2);
  EXPECT_EQ(other.inner.ranks(), g.inner.ranks());
  EXPECT_NE(other.inner.name(), g.inner.name());
  EXPECT_EQ(rank_sum(other.inner), sum(g.inner.ranks()));
  // inner size 1: no inner group, the world outside.
  comm::GridGroups one = comm::grid_groups("test.one", "test inner size", 1);
  EXPECT_FALSE(one.inner.is_member());
  EXPECT_EQ(one.outer.size(), n);
}

TEST_F(MeshTest, AThreeAxisGridGroupsAlongAnySetOfAxes) {
  const int n = comm::get_world_size(), me = comm::get_rank();
  if (n != 4) GTEST_SKIP() << "needs 4 ranks";
  // {2, 1, 2}: the ranks that differ along the first and last axes are all four; along the last, consecutive pairs;
  // along the first, the ranks two apart; along none, each rank alone.
  const comm::Mesh mesh("test.mesh", {2, 1, 2}, "test mesh");
  comm::ProcessGroup ends = mesh.group({0, 2});
  EXPECT_EQ(ends.ranks(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(rank_sum(ends), 6);
  comm::ProcessGroup last = mesh.group({2});
  EXPECT_EQ(last.ranks(), (std::vector<int>{me - me % 2, me - me % 2 + 1}));
  EXPECT_EQ(rank_sum(last), sum(last.ranks()));
  comm::ProcessGroup first = mesh.group({0});
  EXPECT_EQ(first.ranks(), (std::vector<int>{me % 2, me % 2 + 2}));
  EXPECT_EQ(rank_sum(first), sum(first.ranks()));
  comm::ProcessGroup alone = mesh.group({});
  EXPECT_EQ(alone.ranks(), std::vector<int>{me});
}

TEST_F(MeshTest, ASizeThatDoesNotDivideIsRefusedByName) {
  const int n = comm::get_world_size();
  try {
    comm::grid_groups("test.bad", "test.inner_size", n + 1);
    if (n + 1 > 1) ADD_FAILURE() << "no error";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("test.inner_size (" + std::to_string(n + 1) + ") must divide the world of " +
                                         std::to_string(n) + " ranks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(comm::Mesh("test.bad", {n, 2}, "test mesh"), deepspeed::ConfigError);
  // Nothing was made: the world still runs collectives in step.
  at::Tensor t = at::ones({1});
  comm::get_world_group().all_reduce(t);
  EXPECT_EQ(t.item<float>(), n);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  deepspeed::comm::init_distributed();
  int rc = RUN_ALL_TESTS();
  deepspeed::comm::barrier();
  deepspeed::comm::destroy_process_group();
  return rc;
}
