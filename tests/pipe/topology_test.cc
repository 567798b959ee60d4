#include "deepspeed/pipe/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "deepspeed/error.h"

namespace deepspeed::pipe {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

using Lists = std::vector<std::vector<int>>;

std::vector<std::vector<int>> kGridShapes = {{2, 2}, {4, 1}, {1, 4}, {2, 2, 2}, {3, 2}, {2, 3, 4}, {5}};

ProcessTopology make_topology(const std::vector<int>& dims) {
  std::vector<std::string> axes;
  for (size_t i = 0; i < dims.size(); ++i) axes.push_back("a" + std::to_string(i));
  return ProcessTopology(axes, dims);
}

// Row-major reference computed independently of the implementation's strides.
int reference_rank(const std::vector<int>& dims, const std::vector<int>& coord) {
  int rank = 0;
  for (size_t i = 0; i < dims.size(); ++i) rank = rank * dims[i] + coord[i];
  return rank;
}

// Every coordinate of the grid, in row-major order.
std::vector<std::vector<int>> all_coords(const std::vector<int>& dims) {
  std::vector<std::vector<int>> out = {{}};
  for (int d : dims) {
    std::vector<std::vector<int>> next;
    for (const auto& prefix : out) {
      for (int v = 0; v < d; ++v) {
        next.push_back(prefix);
        next.back().push_back(v);
      }
    }
    out = next;
  }
  return out;
}

TEST(ProcessTopologyTest, RankCoordRoundTripsForEveryShape) {
  for (const auto& dims : kGridShapes) {
    ProcessTopology topo = make_topology(dims);
    int expected_world = 1;
    for (int d : dims) expected_world *= d;
    ASSERT_EQ(topo.world_size(), expected_world) << topo.to_string();
    std::set<int> seen;
    for (const auto& coord : all_coords(dims)) {
      AxisValues values;
      // Given in reverse axis order: get_rank must go by name, not position.
      for (size_t i = dims.size(); i-- > 0;) values.emplace_back("a" + std::to_string(i), coord[i]);
      const int rank = topo.get_rank(values);
      EXPECT_EQ(rank, reference_rank(dims, coord)) << topo.to_string();
      EXPECT_EQ(topo.get_coord(rank).values(), coord) << topo.to_string() << " rank " << rank;
      EXPECT_EQ(topo.get_rank(topo.get_coord(rank)), rank);
      seen.insert(rank);
    }
    EXPECT_EQ(static_cast<int>(seen.size()), topo.world_size()) << topo.to_string();
  }
}

TEST(ProcessTopologyTest, AxisCommListsPartitionTheRanks) {
  for (const auto& dims : kGridShapes) {
    ProcessTopology topo = make_topology(dims);
    for (size_t a = 0; a < dims.size(); ++a) {
      const std::string axis = "a" + std::to_string(a);
      Lists lists = topo.get_axis_comm_lists(axis);
      ASSERT_EQ(static_cast<int>(lists.size()), topo.world_size() / dims[a])
          << topo.to_string() << " axis " << axis;
      std::set<int> covered;
      for (const auto& list : lists) {
        ASSERT_EQ(static_cast<int>(list.size()), dims[a]);
        const ProcessCoord head = topo.get_coord(list[0]);
        for (int k = 0; k < dims[a]; ++k) {
          ProcessCoord c = topo.get_coord(list[k]);
          // Ordered along `axis`, equal on every other axis.
          EXPECT_EQ(c.get(axis), k) << topo.to_string();
          for (size_t o = 0; o < dims.size(); ++o) {
            if (o != a) {
              EXPECT_EQ(c.values()[o], head.values()[o]) << topo.to_string();
            }
          }
          EXPECT_TRUE(covered.insert(list[k]).second) << "rank " << list[k] << " in two lists";
        }
      }
      EXPECT_EQ(static_cast<int>(covered.size()), topo.world_size());
      // Lists come in row-major order of the other axes: their heads ascend.
      for (size_t i = 1; i < lists.size(); ++i) EXPECT_LT(lists[i - 1][0], lists[i][0]);
    }
  }
}

TEST(ProcessTopologyTest, FilterMatchAndAxisListAgreeWithCoordinates) {
  for (const auto& dims : kGridShapes) {
    ProcessTopology topo = make_topology(dims);
    EXPECT_EQ(static_cast<int>(topo.filter_match({}).size()), topo.world_size());
    for (size_t a = 0; a < dims.size(); ++a) {
      const std::string axis = "a" + std::to_string(a);
      for (int v = 0; v < dims[a]; ++v) {
        std::vector<int> expected;
        for (int r = 0; r < topo.world_size(); ++r) {
          if (topo.get_coord(r).get(axis) == v) expected.push_back(r);
        }
        EXPECT_EQ(topo.filter_match({{axis, v}}), expected) << topo.to_string();
        EXPECT_EQ(topo.get_axis_list(axis, v), expected) << topo.to_string();
      }
    }
    // A full filter matches exactly get_rank.
    for (int r = 0; r < topo.world_size(); ++r) {
      EXPECT_EQ(topo.filter_match(topo.get_coord(r).as_axis_values()), std::vector<int>{r});
    }
  }
}

// The values in DeepSpeed's docstrings and unit tests.
TEST(ProcessTopologyTest, DeepSpeedDocumentedExamples) {
  ProcessTopology xy({"x", "y"}, {2, 3});
  EXPECT_EQ(xy.get_rank({{"x", 0}, {"y", 1}}), 1);
  EXPECT_EQ(xy.get_dim("y"), 3);
  ProcessCoord c = xy.get_coord(1);
  EXPECT_EQ(c["x"], 0);
  EXPECT_EQ(c["y"], 1);
  EXPECT_EQ(c.to_string(), "ProcessCoord(x=0, y=1)");
  EXPECT_EQ(xy.get_axis_list("x", 0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(xy.get_axis_list("y", 0), (std::vector<int>{0, 3}));

  ProcessTopology pdm({"pipe", "data", "model"}, {2, 2, 2});
  EXPECT_EQ(pdm.get_axis_comm_lists("pipe"), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(pdm.get_axis_comm_lists("data"), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(pdm.get_axis_comm_lists("model"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(pdm.filter_match({{"pipe", 0}, {"data", 1}}), (std::vector<int>{2, 3}));

  ProcessTopology ab({"a", "b"}, {2, 2});
  EXPECT_EQ(ab.get_rank_repr(3), "a_01-b_01");
  EXPECT_EQ(ab.get_rank_repr(3, {"a"}), "b_01");
  PipeModelDataParallelTopology pmd(2, 2, 1);
  EXPECT_EQ(pmd.get_rank_repr(3), "model_01");
}

TEST(ProcessTopologyTest, UnknownAxisHasNoDimAndNoCommLists) {
  // DeepSpeed relies on this to run pipe+model+data code on a pipe+data topology.
  PipeDataParallelTopology topo(2, 2);
  EXPECT_EQ(topo.get_dim("model"), 0);
  EXPECT_FALSE(topo.has_axis("model"));
  EXPECT_TRUE(topo.has_axis("data"));
  EXPECT_TRUE(topo.get_axis_comm_lists("model").empty());
}

TEST(PipeTopologyTest, PipeDataParallelLayout) {
  PipeDataParallelTopology topo(/*num_pp=*/2, /*num_dp=*/3);
  EXPECT_EQ(topo.get_axis_names(), (std::vector<std::string>{"pipe", "data"}));
  EXPECT_EQ(topo.world_size(), 6);
  EXPECT_EQ(topo.get_dim("pipe"), 2);
  EXPECT_EQ(topo.get_dim("data"), 3);
  // Data-parallel peers are adjacent ranks; pipelines stride by the data-parallel size.
  EXPECT_EQ(topo.get_axis_comm_lists("data"), (Lists{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(topo.get_axis_comm_lists("pipe"), (Lists{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(topo.get_coord(4)["pipe"], 1);
  EXPECT_EQ(topo.get_coord(4)["data"], 1);
}

TEST(PipeTopologyTest, PipeModelDataParallelLayout) {
  // DeepSpeed's argument order is (pipe, model, data); the axes are (pipe, data, model).
  PipeModelDataParallelTopology topo(/*num_pp=*/2, /*num_mp=*/4, /*num_dp=*/3);
  EXPECT_EQ(topo.get_axis_names(), (std::vector<std::string>{"pipe", "data", "model"}));
  EXPECT_EQ(topo.get_dims(), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(topo.world_size(), 24);
  EXPECT_EQ(topo.get_axis_comm_lists("model")[0], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(topo.get_axis_comm_lists("data")[0], (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(topo.get_axis_comm_lists("pipe")[0], (std::vector<int>{0, 12}));
  EXPECT_EQ(topo.get_rank({{"pipe", 1}, {"data", 2}, {"model", 3}}), 23);
}

TEST(ProcessTopologyTest, BadInputNamesTheValue) {
  EXPECT_THAT(
      [] {
        ProcessTopology({"x", "y"}, {2, 0});
      },
      ThrowsMessage<Error>(HasSubstr("'y' must be >= 1, got 0")));
  EXPECT_THAT(
      [] {
        ProcessTopology({"x", "y"}, {2, -3});
      },
      ThrowsMessage<Error>(HasSubstr("got -3")));
  EXPECT_THAT(
      [] {
        ProcessTopology({"x", "y"}, {2});
      },
      ThrowsMessage<Error>(HasSubstr("2 axes [x, y] but 1 dims")));
  EXPECT_THAT(
      [] {
        ProcessTopology({"x", "x"}, {2, 2});
      },
      ThrowsMessage<Error>(HasSubstr("'x' given twice")));
  EXPECT_THAT([] { ProcessTopology({}, {}); },
              ThrowsMessage<Error>(HasSubstr("at least one axis")));
  EXPECT_THAT([] { PipeDataParallelTopology(0, 2); },
              ThrowsMessage<Error>(HasSubstr("'pipe' must be >= 1, got 0")));

  PipeDataParallelTopology topo(2, 3);
  EXPECT_THAT(
      [&] {
        topo.get_rank({{"pipe", 0}, {"model", 0}});
      },
      ThrowsMessage<Error>(HasSubstr("unknown axis 'model'")));
  EXPECT_THAT(
      [&] {
        topo.get_rank({{"pipe", 0}, {"data", 3}});
      },
      ThrowsMessage<Error>(HasSubstr("data=3 out of range [0, 3)")));
  EXPECT_THAT(
      [&] {
        topo.get_rank({{"pipe", -1}, {"data", 0}});
      },
      ThrowsMessage<Error>(HasSubstr("pipe=-1 out of range")));
  EXPECT_THAT(
      [&] {
        topo.get_rank({{"pipe", 0}});
      },
      ThrowsMessage<Error>(HasSubstr("use filter_match")));
  EXPECT_THAT(
      [&] {
        topo.get_rank({{"pipe", 0}, {"pipe", 1}});
      },
      ThrowsMessage<Error>(HasSubstr("'pipe' given twice")));
  EXPECT_THAT([&] { topo.get_coord(6); },
              ThrowsMessage<Error>(HasSubstr("rank 6 out of range [0, 6)")));
  EXPECT_THAT([&] { topo.get_coord(-1); }, ThrowsMessage<Error>(HasSubstr("rank -1 out of range")));
  EXPECT_THAT(
      [&] {
        topo.filter_match({{"model", 0}});
      },
      ThrowsMessage<Error>(HasSubstr("unknown axis 'model'")));
  EXPECT_THAT(
      [&] {
        topo.filter_match({{"pipe", 2}});
      },
      ThrowsMessage<Error>(HasSubstr("pipe=2 out of range [0, 2)")));
  EXPECT_THAT([&] { topo.get_axis_list("model", 0); },
              ThrowsMessage<Error>(HasSubstr("unknown axis 'model'")));
  EXPECT_THAT([&] { topo.get_axis_list("data", 7); },
              ThrowsMessage<Error>(HasSubstr("data=7 out of range")));
  EXPECT_THAT([&] { topo.get_coord(0).get("model"); },
              ThrowsMessage<Error>(HasSubstr("unknown axis 'model'")));
}

// Every rank's groups are the comm lists that hold it, and the pipeline neighbours are the ranks of
// the adjacent stages with the same data and model coordinates.
TEST(PipeGridRanksTest, GroupsAreTheCommListsHoldingTheRank) {
  std::vector<ProcessTopology> topologies = {
      PipeDataParallelTopology(2, 2),         PipeDataParallelTopology(4, 1),
      PipeDataParallelTopology(1, 4),         PipeModelDataParallelTopology(2, 2, 2),
      PipeModelDataParallelTopology(3, 2, 1), PipeModelDataParallelTopology(2, 1, 3)};
  for (const ProcessTopology& topo : topologies) {
    const bool has_model = topo.has_axis("model");
    auto holding = [&](const std::string& axis, int rank) {
      for (const auto& list : topo.get_axis_comm_lists(axis)) {
        if (std::find(list.begin(), list.end(), rank) != list.end()) return list;
      }
      return std::vector<int>{};
    };
    for (int rank = 0; rank < topo.world_size(); ++rank) {
      const PipeGridRanks grid = pipe_grid_ranks(topo, rank);
      const ProcessCoord coord = topo.get_coord(rank);
      SCOPED_TRACE(topo.to_string() + " rank " + std::to_string(rank));
      EXPECT_EQ(grid.global_rank, rank);
      EXPECT_EQ(grid.stage_id, coord["pipe"]);
      EXPECT_EQ(grid.data_parallel_id, coord["data"]);
      EXPECT_EQ(grid.model_parallel_id, has_model ? coord["model"] : 0);
      EXPECT_EQ(grid.pipe_parallel_size, topo.get_dim("pipe"));
      EXPECT_EQ(grid.data_parallel_size, topo.get_dim("data"));
      EXPECT_EQ(grid.model_parallel_size, has_model ? topo.get_dim("model") : 1);
      EXPECT_EQ(grid.pipe_group, holding("pipe", rank));
      EXPECT_EQ(grid.data_group, holding("data", rank));
      EXPECT_EQ(grid.model_group, has_model ? holding("model", rank) : std::vector<int>{rank});
      EXPECT_EQ(static_cast<int>(grid.replica_group.size()),
                topo.world_size() / topo.get_dim("data"));
      for (int peer : grid.replica_group) EXPECT_EQ(topo.get_coord(peer)["data"], coord["data"]);
      EXPECT_EQ(grid.is_first_stage(), coord["pipe"] == 0);
      EXPECT_EQ(grid.is_last_stage(), coord["pipe"] == topo.get_dim("pipe") - 1);
      for (int delta : {-1, 1}) {
        const int neighbour = delta < 0 ? grid.prev_stage_rank : grid.next_stage_rank;
        const int stage = coord["pipe"] + delta;
        if (stage < 0 || stage >= topo.get_dim("pipe")) {
          EXPECT_EQ(neighbour, -1);
          continue;
        }
        ProcessCoord expected = topo.get_coord(neighbour);
        EXPECT_EQ(expected["pipe"], stage);
        EXPECT_EQ(expected["data"], coord["data"]);
        if (has_model) {
          EXPECT_EQ(expected["model"], coord["model"]);
        }
        EXPECT_EQ(stage_to_global(topo, rank, stage), neighbour);
      }
    }
  }
  // DeepSpeed's layout for pipe=2, data=2, model=2 seen from rank 5 (pipe 1, data 0, model 1).
  const PipeGridRanks grid = pipe_grid_ranks(PipeModelDataParallelTopology(2, 2, 2), 5);
  EXPECT_EQ(grid.pipe_group, (std::vector<int>{1, 5}));
  EXPECT_EQ(grid.data_group, (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.model_group, (std::vector<int>{4, 5}));
  EXPECT_EQ(grid.replica_group, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(grid.prev_stage_rank, 1);
  EXPECT_EQ(grid.next_stage_rank, -1);
}

TEST(PipeGridRanksTest, BadInputNamesTheValue) {
  EXPECT_THAT(
      [] {
        pipe_grid_ranks(ProcessTopology({"x", "y"}, {2, 2}), 0);
      },
      ThrowsMessage<Error>(HasSubstr("needs 'pipe' and 'data' axes")));
  EXPECT_THAT([] { pipe_grid_ranks(PipeDataParallelTopology(2, 2), 4); },
              ThrowsMessage<Error>(HasSubstr("rank 4 out of range [0, 4)")));
  EXPECT_THAT([] { stage_to_global(PipeDataParallelTopology(2, 2), 0, 2); },
              ThrowsMessage<Error>(HasSubstr("pipe=2 out of range [0, 2)")));
}

}  // namespace
}  // namespace deepspeed::pipe
