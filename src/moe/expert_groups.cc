// The expert-parallel and expert-data-parallel process groups, one pair per ep_size, created the
// first time a layer asks (include/deepspeed/moe/layer.h). Every rank creates every group of the
// layout in the same order, as comm::new_group requires, and keeps its own. Like DeepSpeed's
// groups module, the pairs are made once, but they belong to the world they were made in
// (comm/world_state.h): destroy_process_group() takes them along, and a new world makes its own.
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/world_state.h"
#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/moe/layer.h"

namespace deepspeed::moe {
namespace {

struct ExpertGroupCache {
  std::mutex mutex;  // layers are built from one thread, but a lock costs nothing here
  std::map<int, ExpertGroups> by_ep_size;
};

}  // namespace

ExpertGroups expert_groups(int ep_size) {
  DS_CHECK_T(ConfigError, ep_size >= 1, "moe: ep_size must be >= 1, got ", ep_size);
  auto cache = std::static_pointer_cast<ExpertGroupCache>(
      comm::world_state("moe.expert_groups", [] { return std::make_shared<ExpertGroupCache>(); }));
  std::lock_guard<std::mutex> lock(cache->mutex);
  auto it = cache->by_ep_size.find(ep_size);
  if (it != cache->by_ep_size.end()) return it->second;
  const int world = comm::get_world_size();
  DS_CHECK_T(ConfigError, world % ep_size == 0, "moe: ep_size ", ep_size,
             " does not divide the world of ", world, " ranks; choose an ep_size that divides it");
  ExpertGroups g;
  g.ep_size = ep_size;
  g.name = "ep_size_" + std::to_string(ep_size);
  if (ep_size == 1) {
    // Every rank holds every expert: the experts are ordinary data-parallel parameters.
    g.expert_data_parallel = comm::get_world_group();
  } else {
    for (int first = 0; first < world; first += ep_size) {
      std::vector<int> ranks;
      for (int r = first; r < first + ep_size; ++r) ranks.push_back(r);
      comm::ProcessGroup pg = comm::new_group(ranks);
      if (pg.is_member()) g.expert_parallel = pg;
    }
    // At ep_size == world these are groups of one: reductions over them are no-ops, yet the engine
    // still knows the experts are not the world's to average.
    for (int j = 0; j < ep_size; ++j) {
      std::vector<int> ranks;
      for (int r = j; r < world; r += ep_size) ranks.push_back(r);
      comm::ProcessGroup pg = comm::new_group(ranks);
      if (pg.is_member()) g.expert_data_parallel = pg;
    }
  }
  return cache->by_ep_size.emplace(ep_size, std::move(g)).first->second;
}

}  // namespace deepspeed::moe
