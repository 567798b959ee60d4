// Builds the ZeRO stage a config asks for (zero_optimization.stage, its buckets, offload and stage-3 knobs) behind
// the Stage seam (stage.h). The engine calls it once; adding a stage means implementing Stage and a branch here.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "zero/flat_params.h"
#include "zero/stage.h"

namespace deepspeed::zero {

// The dtype gradients are reduced in: `communication_data_type`, or with sequence_parallel_size > 1 DeepSpeed's
// `seq_parallel_communication_data_type` (which replaces it there, default fp32). Unset: fp32, where DeepSpeed
// would use the model's 16-bit type (our buckets accumulate in fp32 and lose nothing on the way); but gradients
// accumulated in 16 bits at stages 0 and 1 (sixteen_bit_gradients) reduce in that dtype, as DeepSpeed's do.
at::ScalarType gradient_communication_dtype(const Config& config);

// The model's 16-bit dtype when its gradients accumulate in it (data_types.grad_accum_dtype naming it, or
// bf16/fp16 master weights); nullopt when they accumulate in fp32.
std::optional<at::ScalarType> sixteen_bit_gradients(const Config& config);

// bf16.bf16_master_weights_and_grads or fp16.fp16_master_weights_and_grads for the model's dtype: the masters (and
// gradients) stay in it; the optimizer steps them in fp32 a chunk at a time.
bool model_dtype_masters(const Config& config);

// ZeRO's module transform, applied before the model is placed and its parameter groups are made: units partitioned
// at construction (zero::Init) are kept for stage 3, which takes them over, and gathered for good at stages 0-2,
// which train the whole model on every rank. Warns (rank 0) about keys this stage ignores as DeepSpeed does.
void apply(const Config& config, const std::shared_ptr<torch::nn::Module>& module);

// `groups` are the engine's parameter groups: stages 0-2 flatten them in place and keep a reference (they must
// outlive the stage); stage 3 partitions their parameters. `dtype` is the model's compute dtype. Every rank ends up
// with the first copy's parameter values. Collective over `world`.
std::unique_ptr<Stage> make_stage(const Config& config, at::ScalarType dtype,
                                  const std::shared_ptr<torch::nn::Module>& module,
                                  std::vector<FlatGroup>& groups, const comm::ProcessGroup& world);

}  // namespace deepspeed::zero
