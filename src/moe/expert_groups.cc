// The expert-parallel and expert-data-parallel process groups, one pair per ep_size, created the
// first time a layer asks (include/deepspeed/moe/layer.h). Every rank creates every group of the
// layout in the same order, as comm::new_group requires, and keeps its own. Like DeepSpeed's
// groups module, the pairs are cached per process, but only for the world they were made in.
#include <map>
#include <mutex>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/moe/layer.h"

namespace deepspeed::moe {

ExpertGroups expert_groups(int ep_size) {
  // Layers are built from one thread, but a lock costs nothing here.
  static std::mutex mutex;
  static std::map<int, ExpertGroups> cache;
  static int64_t cache_world = 0;  // the comm::world_generation() the cached groups belong to
  std::lock_guard<std::mutex> lock(mutex);
  DS_CHECK_T(ConfigError, ep_size >= 1, "moe: ep_size must be >= 1, got ", ep_size);
  if (!comm::is_initialized()) comm::init_distributed();
  if (cache_world != comm::world_generation()) {
    cache.clear();  // handles of a destroyed world: every use would throw
    cache_world = comm::world_generation();
  }
  auto it = cache.find(ep_size);
  if (it != cache.end()) return it->second;

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
  return cache.emplace(ep_size, std::move(g)).first->second;
}

}  // namespace deepspeed::moe
