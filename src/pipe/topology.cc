#include "deepspeed/pipe/topology.h"

#include <climits>
#include <cstdio>
#include <sstream>

#include "deepspeed/error.h"

namespace deepspeed::pipe {

namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::ostringstream os;
  for (size_t i = 0; i < names.size(); ++i) os << (i ? ", " : "") << names[i];
  return os.str();
}

std::string join_ints(const std::vector<int>& values) {
  std::ostringstream os;
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  return os.str();
}

}  // namespace

ProcessCoord::ProcessCoord(std::vector<std::string> axes, std::vector<int> values)
    : axes_(std::move(axes)), values_(std::move(values)) {
  DS_CHECK(axes_.size() == values_.size(), "ProcessCoord: ", axes_.size(), " axes [",
           join_names(axes_), "] but ", values_.size(), " values [", join_ints(values_), "]");
}

int ProcessCoord::get(const std::string& axis) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i] == axis) return values_[i];
  }
  throw Error(
      detail::str_cat("ProcessCoord: unknown axis '", axis, "' (axes: ", join_names(axes_), ")"));
}

AxisValues ProcessCoord::as_axis_values() const {
  AxisValues out;
  for (size_t i = 0; i < axes_.size(); ++i) out.emplace_back(axes_[i], values_[i]);
  return out;
}

std::string ProcessCoord::to_string() const {
  std::ostringstream os;
  os << "ProcessCoord(";
  for (size_t i = 0; i < axes_.size(); ++i) os << (i ? ", " : "") << axes_[i] << "=" << values_[i];
  os << ")";
  return os.str();
}

ProcessTopology::ProcessTopology(std::vector<std::string> axes, std::vector<int> dims)
    : axes_(std::move(axes)), dims_(std::move(dims)) {
  DS_CHECK(!axes_.empty(), "ProcessTopology: needs at least one axis");
  DS_CHECK(axes_.size() == dims_.size(), "ProcessTopology: ", axes_.size(), " axes [",
           join_names(axes_), "] but ", dims_.size(), " dims [", join_ints(dims_), "]");
  for (size_t i = 0; i < axes_.size(); ++i) {
    DS_CHECK(!axes_[i].empty(), "ProcessTopology: axis ", i, " has an empty name");
    for (size_t j = 0; j < i; ++j) {
      DS_CHECK(axes_[j] != axes_[i], "ProcessTopology: axis '", axes_[i], "' given twice");
    }
    DS_CHECK(dims_[i] >= 1, "ProcessTopology: dim of axis '", axes_[i], "' must be >= 1, got ",
             dims_[i]);
  }
  strides_.assign(dims_.size(), 1);
  long long size = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    strides_[i] = static_cast<int>(size);
    size *= dims_[i];
    DS_CHECK(size <= INT_MAX, "ProcessTopology: world size of dims [", join_ints(dims_),
             "] overflows int");
  }
  world_size_ = static_cast<int>(size);
}

int ProcessTopology::axis_index(const std::string& axis) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i] == axis) return static_cast<int>(i);
  }
  return -1;
}

int ProcessTopology::checked_axis_index(const std::string& axis, const char* caller) const {
  int idx = axis_index(axis);
  DS_CHECK(idx >= 0, "ProcessTopology::", caller, ": unknown axis '", axis,
           "' (axes: ", join_names(axes_), ")");
  return idx;
}

void ProcessTopology::check_rank(int rank, const char* caller) const {
  DS_CHECK(rank >= 0 && rank < world_size_, "ProcessTopology::", caller, ": rank ", rank,
           " out of range [0, ", world_size_, ")");
}

void ProcessTopology::check_axis_value(int axis_idx, int value, const char* caller) const {
  DS_CHECK(value >= 0 && value < dims_[axis_idx], "ProcessTopology::", caller, ": ",
           axes_[axis_idx], "=", value, " out of range [0, ", dims_[axis_idx], ")");
}

int ProcessTopology::get_rank(const AxisValues& coord) const {
  DS_CHECK(coord.size() == axes_.size(), "ProcessTopology::get_rank: needs a value for each of ",
           axes_.size(), " axes (", join_names(axes_), "), got ", coord.size(),
           "; use filter_match for partial coordinates");
  std::vector<bool> seen(axes_.size(), false);
  long long rank = 0;
  for (const auto& [axis, value] : coord) {
    int idx = checked_axis_index(axis, "get_rank");
    DS_CHECK(!seen[idx], "ProcessTopology::get_rank: axis '", axis, "' given twice");
    seen[idx] = true;
    check_axis_value(idx, value, "get_rank");
    rank += static_cast<long long>(value) * strides_[idx];
  }
  return static_cast<int>(rank);
}

int ProcessTopology::get_rank(const ProcessCoord& coord) const {
  return get_rank(coord.as_axis_values());
}

ProcessCoord ProcessTopology::get_coord(int rank) const {
  check_rank(rank, "get_coord");
  std::vector<int> values(axes_.size());
  for (size_t i = 0; i < axes_.size(); ++i) values[i] = (rank / strides_[i]) % dims_[i];
  return ProcessCoord(axes_, std::move(values));
}

int ProcessTopology::get_dim(const std::string& axis) const {
  int idx = axis_index(axis);
  return idx < 0 ? 0 : dims_[idx];
}

std::vector<std::vector<int>> ProcessTopology::get_axis_comm_lists(const std::string& axis) const {
  std::vector<std::vector<int>> lists;
  int idx = axis_index(axis);
  if (idx < 0) return lists;
  // Ranks whose coordinate on `axis` is 0, taken in increasing order, enumerate the other axes'
  // combinations in row-major order; each such rank heads one list.
  for (int rank = 0; rank < world_size_; ++rank) {
    if ((rank / strides_[idx]) % dims_[idx] != 0) continue;
    std::vector<int> list(dims_[idx]);
    for (int k = 0; k < dims_[idx]; ++k) list[k] = rank + k * strides_[idx];
    lists.push_back(std::move(list));
  }
  return lists;
}

std::vector<int> ProcessTopology::filter_match(const AxisValues& filter) const {
  std::vector<int> wanted(axes_.size(), -1);  // -1: any value
  for (const auto& [axis, value] : filter) {
    int idx = checked_axis_index(axis, "filter_match");
    DS_CHECK(wanted[idx] < 0, "ProcessTopology::filter_match: axis '", axis, "' given twice");
    check_axis_value(idx, value, "filter_match");
    wanted[idx] = value;
  }
  std::vector<int> ranks;
  for (int rank = 0; rank < world_size_; ++rank) {
    bool match = true;
    for (size_t i = 0; i < axes_.size() && match; ++i) {
      match = wanted[i] < 0 || (rank / strides_[i]) % dims_[i] == wanted[i];
    }
    if (match) ranks.push_back(rank);
  }
  return ranks;
}

std::vector<int> ProcessTopology::get_axis_list(const std::string& axis, int idx) const {
  int axis_idx = checked_axis_index(axis, "get_axis_list");
  check_axis_value(axis_idx, idx, "get_axis_list");
  return filter_match({{axis, idx}});
}

std::string ProcessTopology::get_rank_repr(int rank, const std::vector<std::string>& omit_axes,
                                           const std::string& inner_sep,
                                           const std::string& outer_sep) const {
  ProcessCoord coord = get_coord(rank);
  std::string out;
  for (size_t i = 0; i < axes_.size(); ++i) {
    bool omitted = false;
    for (const auto& omit : omit_axes) omitted = omitted || omit == axes_[i];
    if (omitted) continue;
    char digits[16];
    std::snprintf(digits, sizeof(digits), "%02d", coord.values()[i]);
    if (!out.empty()) out += outer_sep;
    out += axes_[i] + inner_sep + digits;
  }
  return out;
}

std::string ProcessTopology::to_string() const {
  return detail::str_cat("ProcessTopology(axes=[", join_names(axes_), "], dims=[", join_ints(dims_),
                         "])");
}

PipeDataParallelTopology::PipeDataParallelTopology(int num_pp, int num_dp)
    : ProcessTopology({"pipe", "data"}, {num_pp, num_dp}) {}

PipeModelDataParallelTopology::PipeModelDataParallelTopology(int num_pp, int num_mp, int num_dp)
    : ProcessTopology({"pipe", "data", "model"}, {num_pp, num_dp, num_mp}) {}

int stage_to_global(const ProcessTopology& topology, int global_rank, int stage_id) {
  AxisValues coord = topology.get_coord(global_rank).as_axis_values();
  bool has_pipe = false;
  for (auto& [axis, value] : coord) {
    if (axis == "pipe") {
      value = stage_id;
      has_pipe = true;
    }
  }
  DS_CHECK(has_pipe, "stage_to_global: ", topology.to_string(), " has no 'pipe' axis");
  return topology.get_rank(coord);
}

PipeGridRanks pipe_grid_ranks(const ProcessTopology& topology, int global_rank) {
  DS_CHECK(topology.has_axis("pipe") && topology.has_axis("data"),
           "pipe_grid_ranks: ", topology.to_string(), " needs 'pipe' and 'data' axes");
  const ProcessCoord coord = topology.get_coord(global_rank);
  PipeGridRanks grid;
  grid.global_rank = global_rank;
  grid.stage_id = coord.get("pipe");
  grid.data_parallel_id = coord.get("data");
  grid.pipe_parallel_size = topology.get_dim("pipe");
  grid.data_parallel_size = topology.get_dim("data");
  const bool has_model = topology.has_axis("model");
  grid.model_parallel_id = has_model ? coord.get("model") : 0;
  grid.model_parallel_size = has_model ? topology.get_dim("model") : 1;

  // The one list along each axis that holds this rank: all its other coordinates fixed.
  auto peers_along = [&](const std::string& axis) {
    AxisValues fixed;
    for (const auto& [name, value] : coord.as_axis_values()) {
      if (name != axis) fixed.emplace_back(name, value);
    }
    return topology.filter_match(fixed);
  };
  grid.pipe_group = peers_along("pipe");
  grid.data_group = peers_along("data");
  grid.model_group = has_model ? peers_along("model") : std::vector<int>{global_rank};
  grid.replica_group = topology.get_axis_list("data", grid.data_parallel_id);
  if (!grid.is_first_stage()) grid.prev_stage_rank = grid.pipe_group[grid.stage_id - 1];
  if (!grid.is_last_stage()) grid.next_stage_rank = grid.pipe_group[grid.stage_id + 1];
  return grid;
}

}  // namespace deepspeed::pipe
