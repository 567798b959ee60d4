// Process topologies for hybrid parallelism: DeepSpeed's ProcessTopology and its pipeline
// specialisations.
//
// A topology names the axes of a Cartesian grid of processes ("pipe", "data", "model") and gives
// each axis a length. Ranks are laid out row-major over the axes in the order given, so the last
// axis varies fastest: with axes {"pipe", "data"} and dims {2, 3}, ranks 0..2 are pipe stage 0 and
// ranks 3..5 are stage 1, and data-parallel peers are adjacent ranks (DeepSpeed puts data last so
// gradient reductions use the fast intra-node links). The engine turns the rank lists returned here
// (get_axis_comm_lists; pipe_grid_ranks gives one rank's groups and pipeline neighbours) into its
// pipe, data and model communicator groups; this header knows nothing about communication itself.
//
// Names and semantics follow deepspeed/runtime/pipe/topology.py. Like DeepSpeed, get_dim returns 0
// and get_axis_comm_lists returns no lists for an axis the topology does not have, so code written
// for pipe+model+data also runs on a pipe+data topology; every other lookup of an unknown axis, and
// every coordinate or rank out of range, throws deepspeed::Error naming the value.
//
// Thread-safety: a ProcessTopology is immutable after construction; const methods may be called
// from any number of threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace deepspeed::pipe {

// Values for some or all axes, by name, in any order: {{"pipe", 1}, {"data", 0}}. A vector of pairs
// rather than a map so that a key given twice is reported instead of silently collapsed.
using AxisValues = std::vector<std::pair<std::string, int>>;

// One process's position in a topology: a value for each axis, in the topology's axis order
// (DeepSpeed's ProcessCoord namedtuple).
class ProcessCoord {
 public:
  ProcessCoord(std::vector<std::string> axes, std::vector<int> values);

  // The value on `axis`; throws deepspeed::Error for an axis the coordinate does not have.
  int get(const std::string& axis) const;
  int operator[](const std::string& axis) const { return get(axis); }

  const std::vector<std::string>& axes() const { return axes_; }
  const std::vector<int>& values() const { return values_; }

  // The same coordinate as AxisValues, e.g. to feed a modified copy back into get_rank.
  AxisValues as_axis_values() const;

  // "ProcessCoord(pipe=0, data=1)", as Python prints the namedtuple.
  std::string to_string() const;

  bool operator==(const ProcessCoord& other) const {
    return axes_ == other.axes_ && values_ == other.values_;
  }
  bool operator!=(const ProcessCoord& other) const { return !(*this == other); }

 private:
  std::vector<std::string> axes_;
  std::vector<int> values_;
};

class ProcessTopology {
 public:
  // `axes` are distinct non-empty names, `dims[i] >= 1` the length of axis i; the product of dims
  // is the world size.
  ProcessTopology(std::vector<std::string> axes, std::vector<int> dims);
  virtual ~ProcessTopology() = default;

  // The rank at a full coordinate: every axis exactly once, each value in [0, dim).
  // ProcessTopology({"x", "y"}, {2, 3}).get_rank({{"x", 0}, {"y", 1}}) == 1.
  int get_rank(const AxisValues& coord) const;
  int get_rank(const ProcessCoord& coord) const;

  // The coordinate owned by `rank`, 0 <= rank < world_size().
  ProcessCoord get_coord(int rank) const;

  const std::vector<std::string>& get_axis_names() const { return axes_; }
  const std::vector<int>& get_dims() const { return dims_; }

  // The number of processes along `axis`, or 0 when the topology has no such axis (DeepSpeed).
  int get_dim(const std::string& axis) const;

  bool has_axis(const std::string& axis) const { return axis_index(axis) >= 0; }

  // One list per combination of the other axes' values (row-major), each holding the ranks that
  // differ only along `axis`, in increasing order of their `axis` value: the groups that
  // communicate along `axis`. With axes {pipe, data, model} and dims {2, 2, 2},
  // get_axis_comm_lists("pipe") == {{0, 4}, {1, 5}, {2, 6}, {3, 7}}. Empty for an unknown axis.
  std::vector<std::vector<int>> get_axis_comm_lists(const std::string& axis) const;

  // The ranks, ascending, whose coordinates equal every value in `filter` (axes not named match
  // anything; an empty filter matches every rank). With axes {pipe, data, model} and dims {2, 2,
  // 2}, filter_match({{"pipe", 0}, {"data", 1}}) == {2, 3}.
  std::vector<int> filter_match(const AxisValues& filter) const;

  // The ranks, ascending, whose coordinate on `axis` is `idx`. With axes {x, y} and dims {2, 3},
  // get_axis_list("x", 0) == {0, 1, 2} and get_axis_list("y", 0) == {0, 3}.
  std::vector<int> get_axis_list(const std::string& axis, int idx) const;

  int world_size() const { return world_size_; }

  // A rank's coordinate as text for checkpoint file names, skipping `omit_axes`: with axes {a, b}
  // and dims {2, 2}, get_rank_repr(3) == "a_01-b_01" and get_rank_repr(3, {"a"}) == "b_01".
  std::string get_rank_repr(int rank, const std::vector<std::string>& omit_axes = {"data", "pipe"},
                            const std::string& inner_sep = "_",
                            const std::string& outer_sep = "-") const;

  // "ProcessTopology(axes=[pipe, data], dims=[2, 3])".
  std::string to_string() const;

 private:
  int axis_index(const std::string& axis) const;  // -1 when absent
  int checked_axis_index(const std::string& axis, const char* caller) const;
  void check_rank(int rank, const char* caller) const;
  void check_axis_value(int axis_idx, int value, const char* caller) const;

  std::vector<std::string> axes_;
  std::vector<int> dims_;
  std::vector<int> strides_;  // rank = sum(coord[i] * strides_[i]); the last axis has stride 1
  int world_size_ = 1;
};

// Pipeline and data parallelism: axes {"pipe", "data"}, dims {num_pp, num_dp}.
class PipeDataParallelTopology : public ProcessTopology {
 public:
  PipeDataParallelTopology(int num_pp, int num_dp);
};

// Pipeline, data and model (tensor-slicing) parallelism: axes {"pipe", "data", "model"}, dims
// {num_pp, num_dp, num_mp}. The argument order (pipe, model, data) is DeepSpeed's and differs from
// the axis order on purpose: model-parallel peers, which talk most, get adjacent ranks.
class PipeModelDataParallelTopology : public ProcessTopology {
 public:
  PipeModelDataParallelTopology(int num_pp, int num_mp, int num_dp);
};

// The rank lists from which the engine builds one rank's communicator groups: DeepSpeed's
// PipelineParallelGrid without the groups themselves, so the layout is testable without processes.
// The topology needs "pipe" and "data" axes; "model" is optional. c10d's new_group is collective
// over the whole world, so the engine still creates every list of get_axis_comm_lists(axis), in
// order, on every rank, and keeps the one listed here.
struct PipeGridRanks {
  int global_rank = 0;
  int stage_id = 0;           // coordinate on "pipe"
  int data_parallel_id = 0;   // coordinate on "data"
  int model_parallel_id = 0;  // coordinate on "model", 0 without that axis
  int pipe_parallel_size = 1;
  int data_parallel_size = 1;
  int model_parallel_size = 1;   // 1 without a "model" axis
  std::vector<int> pipe_group;   // this rank's pipeline, indexed by stage
  std::vector<int> data_group;   // the data-parallel peers of this stage (gradient all-reduce)
  std::vector<int> model_group;  // the tensor-slicing peers; {global_rank} without a "model" axis
  // Every rank of this model replica (same data id: all stages and slices); DeepSpeed's
  // ds_model_proc_group, over which gradient norms and overflow flags are reduced.
  std::vector<int> replica_group;
  int prev_stage_rank = -1;  // global rank of stage_id - 1 in this pipeline; -1 on the first stage
  int next_stage_rank = -1;  // global rank of stage_id + 1; -1 on the last stage

  bool is_first_stage() const { return stage_id == 0; }
  bool is_last_stage() const { return stage_id == pipe_parallel_size - 1; }
};

PipeGridRanks pipe_grid_ranks(const ProcessTopology& topology, int global_rank);

// The global rank of `stage_id` in the same pipeline as `global_rank` (same data and model
// coordinates): DeepSpeed's PipelineParallelGrid.stage_to_global.
int stage_to_global(const ProcessTopology& topology, int global_rank, int stage_id);

}  // namespace deepspeed::pipe
