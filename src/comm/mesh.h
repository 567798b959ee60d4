// Where every process group of a run is made. Parallelisms lay their ranks out as a row-major grid (the last
// dimension varies fastest), as Megatron, DeepSpeed's ProcessTopology and torch's DeviceMesh do: tensor, sequence and
// expert parallelism split the world into consecutive inner groups and strided outer ones, the pipeline into pipe x
// data (x model), ZeRO++ the world into hosts and hpZ's secondary partitions. A Mesh names such a grid over the world
// and hands out the group along any set of its axes; groups that are no grid (the pipeline's tied-weight groups)
// come from explicit rank lists through the same registry. A grid is always over the whole world: new_group is
// collective over it, so every rank must ask for the same lists, which a grid over each rank's own sub-group (each
// rank a different parent) would not give.
//
// The registry belongs to the current world (comm/world_state.h): a group asked for twice, by the same name and
// ranks, is made once and shared (the layers built before initialize() and the engine get the same handles), and
// destroy_process_group() takes every group along. Making a group is collective over the world: every rank asks for
// the same groups in the same order, as with new_group.
#pragma once

#include <string>
#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::comm {

class Mesh {
 public:
  // The world's ranks as a grid of `dims`, whose product must be the world size (ConfigError naming `what` and both
  // numbers otherwise). `name` keeps apart groups of equal ranks that different subsystems want as communicators of
  // their own.
  Mesh(std::string name, std::vector<int> dims, const std::string& what);
  // This rank's group of the ranks whose coordinates differ from its own only along `axes`. Made the first time
  // (collective), shared after.
  ProcessGroup group(const std::vector<int>& axes) const;
  // Every such group's global ranks, in the order they are made (the first varying axis value fastest).
  std::vector<std::vector<int>> rank_lists(const std::vector<int>& axes) const;
  const std::vector<int>& dims() const { return dims_; }

 private:
  std::string name_;
  std::vector<int> dims_;
};

// The rank lists of Mesh::rank_lists for a grid of `dims` over `ranks` (ranks.size() == product of dims), without
// processes: the groups along `axes`, each in row-major order of its varying axes, the groups in row-major order of
// the fixed ones.
std::vector<std::vector<int>> grid_rank_lists(const std::vector<int>& ranks, const std::vector<int>& dims,
                                              const std::vector<int>& axes);

// The groups of `lists` (global ranks; no rank in two lists), made once per world under `name`: this rank's, or a
// null handle when it is in none. Collective the first time.
ProcessGroup group_from_lists(const std::string& name, const std::vector<std::vector<int>>& lists);

// The two-dimensional grid most parallelisms use: the world split into consecutive groups of `inner_size` ranks (a
// node's fast links carry their frequent collectives) and strided outer groups (the peers that hold the same slice).
struct GridGroups {
  int inner_size = 1;
  ProcessGroup inner;  // this rank's inner group: a null handle at inner_size 1
  ProcessGroup outer;  // the ranks at this rank's position in the other inner groups: the world at inner_size 1
};
// `inner_size` must be >= 1 and divide the world size (ConfigError naming `what` otherwise).
GridGroups grid_groups(const std::string& name, const std::string& what, int inner_size);

}  // namespace deepspeed::comm
