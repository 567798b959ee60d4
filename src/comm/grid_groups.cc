#include "comm/grid_groups.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/world_state.h"
#include "deepspeed/error.h"

namespace deepspeed::comm {
namespace {

struct GridCache {
  std::mutex mutex;
  std::map<int, GridGroups> by_size;
};

}  // namespace

GridGroups grid_groups(const std::string& name, const std::string& what, int inner_size) {
  DS_CHECK_T(ConfigError, inner_size >= 1, what, " must be >= 1, got ", inner_size);
  const int world = get_world_size();
  DS_CHECK_T(ConfigError, world % inner_size == 0, what, " (", inner_size, ") must divide the world of ", world,
             " ranks");
  auto cache = std::static_pointer_cast<GridCache>(
      world_state("grid_groups." + name, [] { return std::make_shared<GridCache>(); }));
  std::lock_guard<std::mutex> lock(cache->mutex);
  if (auto it = cache->by_size.find(inner_size); it != cache->by_size.end()) return it->second;
  GridGroups g;
  g.inner_size = inner_size;
  if (inner_size == 1) {
    g.outer = get_world_group();
    return cache->by_size.emplace(inner_size, std::move(g)).first->second;
  }
  for (int first = 0; first < world; first += inner_size) {
    std::vector<int> ranks;
    for (int r = first; r < first + inner_size; ++r) ranks.push_back(r);
    ProcessGroup pg = new_group(ranks);
    if (pg.is_member()) g.inner = pg;
  }
  for (int j = 0; j < inner_size; ++j) {
    std::vector<int> ranks;
    for (int r = j; r < world; r += inner_size) ranks.push_back(r);
    ProcessGroup pg = new_group(ranks);
    if (pg.is_member()) g.outer = pg;
  }
  return cache->by_size.emplace(inner_size, std::move(g)).first->second;
}

}  // namespace deepspeed::comm
