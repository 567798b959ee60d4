// Which stage-3 runtime owns a parameter, found from the parameter itself: GatheredParameters(tensors) starts from
// bare tensors and must find the stage that partitioned them without a process-wide list of live stages. DeepSpeed's
// Python hangs ds_* attributes on each parameter for this. A LibTorch tensor has no such slot that survives the
// set_data calls that gather and release it, but its gradient accumulator does: the stage's gradient-ready hook
// there names the stage (weakly), and the stage removes it when destroyed. Implemented in unit_autograd.cc.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace deepspeed::zero {

class Stage3;

// The live stage that partitioned `param`, or null.
std::shared_ptr<Stage3*> param_owner(const at::Tensor& param);

}  // namespace deepspeed::zero
