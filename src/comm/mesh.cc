#include "comm/mesh.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "comm/world_state.h"
#include "deepspeed/error.h"

namespace deepspeed::comm {
namespace {

// The world's groups by name and rank lists.
struct Registry {
  std::mutex mutex;
  std::map<std::pair<std::string, std::vector<std::vector<int>>>, ProcessGroup> groups;
};

std::string dims_text(const std::vector<int>& dims) {
  std::string s;
  for (int d : dims) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

}  // namespace

ProcessGroup group_from_lists(const std::string& name, const std::vector<std::vector<int>>& lists) {
  auto registry = std::static_pointer_cast<Registry>(
      world_state("comm.mesh", [] { return std::make_shared<Registry>(); }));
  std::lock_guard<std::mutex> lock(registry->mutex);
  auto key = std::make_pair(name, lists);
  if (auto it = registry->groups.find(key); it != registry->groups.end()) return it->second;
  ProcessGroup mine;
  for (const auto& ranks : lists) {
    ProcessGroup g = new_group(ranks);
    if (g.is_member()) mine = g;
  }
  return registry->groups.emplace(std::move(key), mine).first->second;
}

Mesh::Mesh(std::string name, std::vector<int> dims, const std::string& what)
    : name_(std::move(name)), dims_(std::move(dims)) {
  int64_t product = 1;
  for (int d : dims_) {
    DS_CHECK_T(ConfigError, d >= 1, what, ": every dimension of the rank grid must be >= 1, got ", dims_text(dims_));
    product *= d;
  }
  DS_CHECK_T(ConfigError, product == get_world_size(), what, ": a grid of ", dims_text(dims_),
             " ranks does not cover the world of ", get_world_size(), " ranks");
}

std::vector<std::vector<int>> grid_rank_lists(const std::vector<int>& ranks, const std::vector<int>& dims,
                                              const std::vector<int>& axes) {
  const int n = static_cast<int>(dims.size());
  std::vector<bool> along(n, false);
  for (int a : axes) {
    DS_CHECK(a >= 0 && a < n, "rank grid: axis ", a, " out of range for ", n, " dimensions");
    along[a] = true;
  }
  std::vector<int> strides(n, 1);
  for (int i = n - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  DS_CHECK(n == 0 || static_cast<int64_t>(strides[0]) * dims[0] == static_cast<int64_t>(ranks.size()),
           "rank grid: ", dims_text(dims), " does not cover ", ranks.size(), " ranks");
  // Offsets of every combination of the chosen axes' values, row-major.
  auto offsets_over = [&](bool varying) {
    std::vector<int> offsets{0};
    for (int i = 0; i < n; ++i) {
      if (along[i] != varying) continue;
      std::vector<int> next;
      for (int o : offsets)
        for (int v = 0; v < dims[i]; ++v) next.push_back(o + v * strides[i]);
      offsets = std::move(next);
    }
    return offsets;
  };
  const std::vector<int> bases = offsets_over(false), members = offsets_over(true);
  std::vector<std::vector<int>> lists;
  for (int base : bases) {
    std::vector<int> list;
    for (int m : members) list.push_back(ranks[base + m]);
    lists.push_back(std::move(list));
  }
  return lists;
}

std::vector<std::vector<int>> Mesh::rank_lists(const std::vector<int>& axes) const {
  std::vector<int> world(get_world_size());
  for (size_t r = 0; r < world.size(); ++r) world[r] = static_cast<int>(r);
  return grid_rank_lists(world, dims_, axes);
}

ProcessGroup Mesh::group(const std::vector<int>& axes) const { return group_from_lists(name_, rank_lists(axes)); }

GridGroups grid_groups(const std::string& name, const std::string& what, int inner_size) {
  DS_CHECK_T(ConfigError, inner_size >= 1, what, " must be >= 1, got ", inner_size);
  const int n = get_world_size();
  DS_CHECK_T(ConfigError, n % inner_size == 0, what, " (", inner_size, ") must divide the world of ", n, " ranks");
  GridGroups g;
  g.inner_size = inner_size;
  if (inner_size == 1) {
    g.outer = get_world_group();
    return g;
  }
  const Mesh mesh(name, {n / inner_size, inner_size}, what);
  g.inner = mesh.group({1});
  g.outer = mesh.group({0});
  return g;
}

}  // namespace deepspeed::comm
