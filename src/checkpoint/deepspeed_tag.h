// Checkpoint tags written by Python DeepSpeed (0.19's engine.save_checkpoint), read into the layout our loader
// takes: the model file's keys of include/deepspeed/checkpoint.h and one rank file per data-parallel rank in the
// fp32 partition contract (fp32_flat_groups + param_slices + optimizer_state_dict). The engine then loads them
// exactly as it loads its own: by parameter name, at any world size and stage.
//
// What DeepSpeed writes, and where each piece comes from:
//   stage 0, fp32        mp_rank_00_model_states.pt: `module` (the fp32 weights are the masters), `optimizer` (the
//                        torch optimizer's state_dict: per-parameter state keyed by index)
//   stage 0, bf16/fp16   `optimizer` is FP16_Optimizer's: `fp32_groups_flat` (one flat master per group; the
//                        unfused one: `fp32_groups`, a master per parameter) and its base optimizer's state_dict
//   stages 1 and 2       one zero_pp_rank_<r>_mp_rank_00_optim_states.pt per rank (bf16_zero_pp_rank_... when bf16;
//   (and BF16_Optimizer) stage 1 with bf16 and fp32 gradient accumulation runs BF16_Optimizer, same keys):
//                        `optimizer_state_dict` with
//                        `single_partition_of_fp32_groups`, `base_optimizer_state`, `param_slice_mappings` (where
//                        each parameter's fragment starts in the partition), `partition_count`; the model file's
//                        `param_shapes` names the parameters of each group
//   stage 3              zero_pp_rank_<r>_mp_rank_00_model_states.pt per rank (the module holds placeholders) and
//                        the optim files with `fp32_flat_groups` (per sub-group: each parameter's ceil(numel/N)
//                        slice in turn) and the base optimizer's state over them
// Parameter names are the checkpoint's, passed through the caller's name map (Python module paths to ours).
// At stages 1-2 `base_optimizer_state` is a torch optimizer's state_dict, or with zero_optimization.elastic_checkpoint
// a list of each group's state without its padding (the step in `base_optimizer_state_step` or the states' own).
// Pipeline (layer_XX-model_states.pt) and MoE expert files and frozen parameters are refused, naming what was found.
//
// The rank files are mapped (Python pickles: checkpoint/python_pickle.h), every rank's on every process, and each
// process reads only the elements it copies, as with our own files; stage 0's masters, in the model file, are
// copied whole.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/partition_index.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

// A checkpoint's parameter or buffer name -> this model's ("module.blocks.0.fc.weight" -> "blocks.0.fc.weight").
// Empty: names are used as they are.
using CheckpointNameMap = std::function<std::string(const std::string&)>;

struct ForeignTag {
  StateDict model = make_state_dict();  // our model file's keys (module, buffer_names, global_steps, ...)
  std::string model_file;           // the file they came from (rank 0's at stage 3)
  std::vector<std::string> files;   // the rank files, by rank (stage 0: the model file)
  std::vector<StateDict> ranks;     // in the fp32 partition contract, by rank
};

// True when <dir>/<tag> holds a checkpoint that Python DeepSpeed wrote: its model file carries no
// ds_checkpoint_format stamp (or cannot be read by torch's C++ unpickler but can by ours), or, at stage 3, only
// per-rank zero_pp_rank_<r>_mp_rank_<mp>_model_states.pt files exist. False for ours and for a missing tag (the
// regular loader then reports what is missing).
bool is_python_deepspeed_tag(const std::string& dir, const std::string& tag, int mp_rank = 0,
                             FileSystem* fs = nullptr);

// The model file of a tag (ours: mp_rank_<mp>_model_states.pt as saved; Python DeepSpeed's: translated to our keys,
// its stage-3 rank-0 file when there is no mp_rank file). `file` receives the path read.
StateDict read_model_states(const std::string& dir, const std::string& tag, const CheckpointNameMap& name_map,
                            int mp_rank, FileSystem* fs, std::string* file);

// Reads the tag. Throws CheckpointError naming the file and what is wrong: a missing rank file, a truncated file,
// an unknown pickle class, an unsupported layout, or inconsistent partitions.
ForeignTag read_python_deepspeed_tag(const std::string& dir, const std::string& tag,
                                     const CheckpointNameMap& name_map = {}, int mp_rank = 0,
                                     FileSystem* fs = nullptr);

// The fp32 partitions of <dir>/<tag> whoever wrote it: ours mapped (load_partition_index), Python DeepSpeed's
// translated (read_python_deepspeed_tag, names as they are). `translated` receives the translation when there was
// one (its model file's entries are what a caller of ours would load from mp_rank_00_model_states.pt).
PartitionIndex load_any_partition_index(const std::string& dir, const std::string& tag, FileSystem* fs,
                                        std::optional<ForeignTag>* translated);

}  // namespace deepspeed::checkpoint
