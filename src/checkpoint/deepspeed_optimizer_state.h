// Reading Python DeepSpeed's checkpoint pickles: checked accessors whose errors name the file and the path inside
// it, and the translation of its optimizer states (a torch optimizer's state_dict over flat fp32 buffers, or the
// elastic form of stages 1-2) into our optimizer_state_dict entry. Used by deepspeed_tag.cc, which reads whole tags.
// Stateless; thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint::deepspeed_files {

// d[key]; `where` names the file and the path to d in the error (CheckpointError).
c10::IValue need(const c10::IValue& d, const std::string& key, const std::string& where);
c10::impl::GenericList need_list(const c10::IValue& d, const std::string& key, const std::string& where);
// A number pickled as an int or a float.
double as_double(const c10::IValue& v);
// A 1-D fp32 tensor (DeepSpeed's flat groups are fp32; a bf16 run's masters too).
at::Tensor flat_fp32(const c10::IValue& v, const std::string& where);

// The step count in a torch optimizer's per-parameter state ('step': a 0-d tensor or a number), or in its param
// group (DeepSpeed's fused optimizers); -1 when neither has one.
int64_t step_of(const std::optional<c10::IValue>& state, const c10::IValue& param_group);

// A torch optimizer's state_dict over flat fp32 buffers (ZeRO, FP16_Optimizer: one per param group; stage 3: one per
// sub-group, a param group listing its sub-groups) as our optimizer_state_dict: every per-element state tensor cut
// to its buffer's flat length (DeepSpeed pads them), each buffer with its param group's learning rate.
c10::IValue optimizer_entry(const c10::IValue& base, const std::vector<at::Tensor>& flats, const std::string& where);

// zero_optimization.elastic_checkpoint's form of stages 1-2: base_optimizer_state lists each group's state without
// its padding, and no param_groups (DeepSpeed keeps the running learning rates on such a load; here the schedule
// sets them). The step: the largest of each state's own 'step' (torch's and DeepSpeed's Adam count there) and
// base_optimizer_state_step, which DeepSpeed writes only for optimizers with a step in their param groups and which
// its FusedAdam leaves at 0 there: never the key alone, or Adam's bias correction would start again.
c10::IValue elastic_optimizer_entry(const c10::IValue& osd, const std::vector<at::Tensor>& flats,
                                    const std::string& where);

}  // namespace deepspeed::checkpoint::deepspeed_files
