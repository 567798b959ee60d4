// Builds the ZeRO stage a config asks for (zero_optimization.stage, its buckets, offload and stage-3 knobs) behind
// the Stage seam (stage.h). The engine calls it once; adding a stage means implementing Stage and a branch here.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "zero/flat_params.h"
#include "zero/stage.h"

namespace deepspeed::zero {

// `groups` are the engine's parameter groups: stages 0-2 flatten them in place and keep a reference (they must
// outlive the stage); stage 3 partitions their parameters. `dtype` is the model's compute dtype. Every rank ends up
// with the first copy's parameter values. Collective over `world`.
std::unique_ptr<Stage> make_stage(const Config& config, at::ScalarType dtype,
                                  const std::shared_ptr<torch::nn::Module>& module,
                                  std::vector<FlatGroup>& groups, const comm::ProcessGroup& world);

}  // namespace deepspeed::zero
