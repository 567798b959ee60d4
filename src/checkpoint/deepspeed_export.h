// Writes a checkpoint in Python DeepSpeed's own layout (0.19's engine.save_checkpoint), so that DeepSpeed's
// load_checkpoint resumes from it and its zero_to_fp32.py reads it: the way back of deepspeed_tag.h.
//
// DeepSpeed's rank files are rigid: rank r's file must hold exactly the elements DeepSpeed's partitioning gives
// rank r at the world size and stage it resumes with, so the export re-partitions (from ours, or from another
// DeepSpeed tag, at any world size) as DeepSpeed would:
//   stage 0, fp32    mp_rank_00_model_states.pt with `optimizer`: the torch optimizer's state_dict, one state per
//                    parameter, keyed by the parameter's index across groups
//   stage 0, bf16    `optimizer` is FP16_Optimizer's (unfused): `fp32_groups` (a master per parameter) and its
//                    base optimizer's state_dict
//   stages 1 and 2   [bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt: each group's parameters concatenated in
//                    order, padded to a multiple of 2 x world, rank r holding the r-th equal part
//                    (`single_partition_of_fp32_groups` without the padding, `base_optimizer_state` with it,
//                    `param_slice_mappings`); with zero_optimization.elastic_checkpoint in the checkpoint's config
//                    (or DeepSpeedExportOptions::elastic), `base_optimizer_state` lists each group's state without
//                    the padding, and `base_optimizer_state_step` the step (DeepSpeed's elastic form)
//   stage 3          a zero_pp_rank_<r>_mp_rank_00_model_states.pt per rank (parameters as empty placeholders) and
//                    optim files whose `fp32_flat_groups` hold, per sub-group (zero_optimization.sub_group_size),
//                    each parameter's r-th ceil(numel / world) slice in turn
// DeepSpeed builds its groups from the Python model's parameters: the export keeps the checkpoint's groups and
// their order (the model file's param_shapes), which must be how the Python side groups them.
//
// Adam and AdamW states only (exp_avg, exp_avg_sq); fp32 and bf16. Pipeline, MoE and fp16 checkpoints are refused
// by name. The optimizer's hyperparameters (betas, eps, weight decay, the current learning rate) come from the
// checkpoint's config and rank files: DeepSpeed's torch optimizer takes them from the file.
#pragma once

#include <optional>
#include <string>

#include "checkpoint/deepspeed_tag.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

// DeepSpeed's release whose layout the export writes (its ds_version key).
constexpr const char* kDeepSpeedLayoutVersion = "0.19.8";

struct DeepSpeedExportOptions {
  std::optional<int> world_size;  // data-parallel ranks DeepSpeed resumes with (default: the checkpoint's)
  std::optional<int> zero_stage;  // 0..3 (default: the checkpoint's)
  // Stages 1-2: the optimizer state in DeepSpeed's elastic form (default: the saved config's
  // zero_optimization.elastic_checkpoint). Either way not for BF16_Optimizer's stage 1, whose files are rigid.
  std::optional<bool> elastic;
  CheckpointNameMap name_map;     // our parameter and buffer names -> the Python model's; empty: the same
  // Write only this rank's files (the model file too when it is 0; per-rank model files at stage 3), as each rank of
  // a saving engine does; unset: every rank's.
  std::optional<int> only_rank;
  bool write_latest = true;  // <save_dir>/latest naming the tag
};

struct DeepSpeedExportStats {
  bool elastic = false;  // the optimizer state went in DeepSpeed's elastic form
  int ranks = 0;        // rank files written
  int64_t params = 0;   // parameters
  int64_t bytes = 0;    // tensor bytes written
};

// Reads <dir>/<tag> (ours or DeepSpeed's; an empty tag: the one `latest` names) and writes DeepSpeed's layout of
// it into the folder `out_dir` (<save_dir>/<tag>), with <save_dir>/latest naming it. Throws CheckpointError (one
// line naming the file or key) on what cannot be exported.
DeepSpeedExportStats write_deepspeed_tag(const std::string& dir, const std::string& tag, const std::string& out_dir,
                                         const DeepSpeedExportOptions& options = {}, FileSystem* fs = nullptr);

}  // namespace deepspeed::checkpoint
