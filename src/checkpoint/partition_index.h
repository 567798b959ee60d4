// The fp32 partitions of a checkpoint tag, indexed by parameter name: which rank file, flat group
// and offset hold which elements of each parameter (the contract in
// include/deepspeed/checkpoint.h). fp32 consolidation (ds_to_fp32) and the engine's loader share
// it; the loader also reads the optimizer states at the same offsets, which is what lets a
// checkpoint saved by N ranks at one ZeRO stage be loaded by M ranks at another.
//
// Rank files are mapped, not read: building the index costs their pickles, and each element is
// paged in only when a caller copies it. So their records' CRC-32s are not checked at load: a
// caller calls verify_tensor() on each source (and optimizer state) it copies from.
// Not thread-safe; a plain value.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

// One contiguous run of a parameter's flattened elements held by one rank file.
struct SavedFragment {
  int rank = 0;
  size_t group = 0;   // index into the rank's fp32_flat_groups
  int64_t begin = 0;  // [begin, end) of the flattened parameter
  int64_t end = 0;
  int64_t offset = 0;  // where the run starts in the rank's flat group
  at::Tensor source;   // 1-D fp32 view of those elements in the (mapped) flat group
};

struct SavedParam {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::vector<SavedFragment> fragments;  // sorted by begin; they cover [0, numel) exactly once
};

struct PartitionIndex {
  std::string tag;
  std::vector<std::string> files;  // zero_pp_rank_<r>_mp_rank_00_optim_states.pt, by rank
  std::vector<StateDict> states;   // the mapped rank files, by rank
  std::string run_id;              // shared by every rank file
  std::vector<SavedParam> params;  // in order of first appearance (rank 0 first)
  std::map<std::string, size_t> by_name;

  // nullptr when no rank holds the parameter.
  const SavedParam* find(const std::string& name) const;
};

// Maps every rank file of <dir>/<tag> and indexes its fragments. Throws CheckpointError naming the
// file and the field on a missing rank, metadata from another run or format,
// partition_count/dp_rank disagreement, a malformed slice, or a parameter whose fragments leave a
// gap or overlap.
// `mp_rank`: whose files (a pipeline stage's; 0 without model parallelism).
PartitionIndex load_partition_index(const std::string& dir, const std::string& tag,
                                    FileSystem* fs = nullptr, int mp_rank = 0);

// One entry of a rank file's param_slices (the contract in deepspeed/checkpoint.h): elements [begin, end) of
// parameter `name` sit at `offset` of the rank's flat group.
c10::impl::GenericDict param_slice_entry(const std::string& name, const std::vector<int64_t>& shape,
                                         int64_t begin, int64_t end, int64_t offset);

// A rank file of the contract built in memory (a translated tag): partition_count, dp_rank, fp32_flat_groups,
// param_slices (one list per group) and optimizer_state_dict (our engine's keys: type, step, state_names, state,
// param_groups).
StateDict partition_rank_file(int64_t rank, int64_t count, const std::vector<at::Tensor>& flat_groups,
                              const c10::impl::GenericList& slices, const c10::IValue& optimizer);

// Indexes rank files already in memory (a tag another writer made, translated: deepspeed_tag.h): the same checks
// as load_partition_index but for the run-id stamp. `files` name the sources in errors.
PartitionIndex index_partitions(const std::string& tag, std::vector<std::string> files,
                                std::vector<StateDict> states);

// Each rank file's optimizer states (the contract's optimizer_state_dict: state_names, and per group one flat
// tensor per name at the fp32 group's offsets), checked to name the same states on every rank.
struct RankOptimizerStates {
  std::vector<std::string> names;
  std::vector<std::vector<at::Tensor>> groups;  // [group][k]
};
std::vector<RankOptimizerStates> rank_optimizer_states(const PartitionIndex& index);

// Copies elements [begin, end) of the flattened parameter `p` into `fp32` and each optimizer state into
// `states[k]` (1-D, end - begin long; fewer states than the files hold is fine), checking the CRC-32 of every
// record it reads from.
void copy_param_elements(const PartitionIndex& index, const std::vector<RankOptimizerStates>& optimizers,
                         const SavedParam& p, int64_t begin, int64_t end, const at::Tensor& fp32,
                         const std::vector<at::Tensor>& states);

// The 1-D float32 tensors under `key` of a rank file (fp32_flat_groups, or an optimizer state
// list).
std::vector<at::Tensor> flat_tensor_list(const StateDict& state, const char* key,
                                         const std::string& file);

}  // namespace deepspeed::checkpoint
