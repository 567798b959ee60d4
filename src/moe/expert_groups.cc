// The expert-parallel and expert-data-parallel process groups, one pair per ep_size, made the first time a layer
// asks (include/deepspeed/moe/layer.h): the grid of comm/mesh.h with ep_size consecutive ranks per expert-parallel
// group. Like DeepSpeed's groups module, the pairs are made once, but they belong to the world they were made in:
// destroy_process_group() takes them along, and a new world makes its own.
#include "comm/mesh.h"
#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/moe/layer.h"

namespace deepspeed::moe {

ExpertGroups expert_groups(int ep_size) {
  DS_CHECK_T(ConfigError, ep_size >= 1, "moe: ep_size must be >= 1, got ", ep_size);
  const int world = comm::get_world_size();
  DS_CHECK_T(ConfigError, world % ep_size == 0, "moe: ep_size ", ep_size,
             " does not divide the world of ", world, " ranks; choose an ep_size that divides it");
  // At ep_size 1 every rank holds every expert: the experts are ordinary data-parallel parameters (the outer group
  // is the world). At ep_size == world the outer groups have one rank: reductions over them are no-ops, yet the
  // engine still knows the experts are not the world's to average.
  const comm::GridGroups grid = comm::grid_groups("moe.expert_parallel", "moe: ep_size", ep_size);
  ExpertGroups g;
  g.ep_size = ep_size;
  g.name = "ep_size_" + std::to_string(ep_size);
  g.expert_parallel = grid.inner;
  g.expert_data_parallel = grid.outer;
  return g;
}

}  // namespace deepspeed::moe
