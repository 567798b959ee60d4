// The rank grid every process group is made from (comm/mesh.h), without processes: its groups along one axis are
// ProcessTopology's comm lists (DeepSpeed's layout, tests/pipe/topology_test.cc), along several axes the ranks that
// share the other coordinates, and over a list of ranks its members in the same positions.
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "deepspeed/error.h"
#include "deepspeed/pipe/topology.h"

namespace {

using deepspeed::comm::grid_rank_lists;
using deepspeed::pipe::ProcessTopology;
using Lists = std::vector<std::vector<int>>;

const std::vector<std::vector<int>> kShapes = {{2, 2}, {4, 1}, {1, 4}, {2, 2, 2}, {3, 2}, {2, 3, 4}, {5}};

ProcessTopology topology(const std::vector<int>& dims) {
  std::vector<std::string> axes;
  for (size_t a = 0; a < dims.size(); ++a) axes.push_back("a" + std::to_string(a));
  return ProcessTopology(axes, dims);
}

std::vector<int> iota(int n) {
  std::vector<int> r(n);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

TEST(RankGrid, OneAxisGivesTheTopologysCommLists) {
  for (const auto& dims : kShapes) {
    const ProcessTopology topo = topology(dims);
    for (size_t a = 0; a < dims.size(); ++a)
      EXPECT_EQ(grid_rank_lists(iota(topo.world_size()), dims, {static_cast<int>(a)}),
                topo.get_axis_comm_lists("a" + std::to_string(a)))
          << topo.to_string() << " axis " << a;
  }
}

TEST(RankGrid, SeveralAxesGroupTheRanksThatShareTheOthers) {
  for (const auto& dims : kShapes) {
    if (dims.size() < 2) continue;
    const ProcessTopology topo = topology(dims);
    const int last = static_cast<int>(dims.size()) - 1;
    // Varying the first and last axes: one group per value of the middle axes, as filter_match finds them.
    const Lists lists = grid_rank_lists(iota(topo.world_size()), dims, {0, last});
    std::set<int> covered;
    for (const auto& list : lists) {
      deepspeed::pipe::AxisValues fixed;
      const auto head = topo.get_coord(list.front());
      for (int o = 1; o < last; ++o) fixed.emplace_back("a" + std::to_string(o), head.values()[o]);
      EXPECT_EQ(list, topo.filter_match(fixed)) << topo.to_string();
      covered.insert(list.begin(), list.end());
    }
    EXPECT_EQ(static_cast<int>(covered.size()), topo.world_size()) << topo.to_string();
  }
}

TEST(RankGrid, ListedRanksTakeTheGridPositions) {
  // The ranks 1, 3, 5, 7 as a grid of two by two: consecutive members form the inner groups, strided members the
  // outer ones.
  const std::vector<int> parent = {1, 3, 5, 7};
  EXPECT_EQ(grid_rank_lists(parent, {2, 2}, {1}), (Lists{{1, 3}, {5, 7}}));
  EXPECT_EQ(grid_rank_lists(parent, {2, 2}, {0}), (Lists{{1, 5}, {3, 7}}));
  EXPECT_EQ(grid_rank_lists(parent, {2, 2}, {0, 1}), (Lists{{1, 3, 5, 7}}));
  EXPECT_EQ(grid_rank_lists(parent, {2, 2}, {}), (Lists{{1}, {3}, {5}, {7}}));
}

TEST(RankGrid, ABadGridIsRefusedNamingIt) {
  EXPECT_THROW(grid_rank_lists(iota(6), {2, 2}, {0}), deepspeed::Error);
  EXPECT_THROW(grid_rank_lists(iota(4), {2, 2}, {2}), deepspeed::Error);
}

}  // namespace
