// tensor_parallel.autotp_size as a module transform, applied first when the engine is built, by runtime::make_layout
// (docs/architecture.md: the transforms' order). It forms the tensor-parallel groups, runs AutoTP on a model written
// for one device, and hands the engine the layout it trains over.
//
// The tensor-parallel ranks of one replica become the engine's model-parallel group (gradient norm and fp16 overflow
// agreed over it, checkpoint files mp_rank_<tp rank>); the ranks holding the same slice of every replica are its
// data-parallel world (gradients averaged, ZeRO 1/2 partitions). Parameters the layers do not split (LayerNorms,
// row-parallel biases, position embeddings) are whole and equal on every tensor rank: tensor rank 0 alone counts them
// in the norm, as Megatron's param_is_not_tensor_parallel_duplicate does.
#pragma once

#include <torch/nn/module.h>

#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"

namespace deepspeed::tp {

// Applies the transform: with autotp_size > 1 sets options.data_parallel_group, model_parallel_group and
// norm_excluded_params and returns true; otherwise checks the model's deepspeed::tp layers against the config and
// returns false. A caller that lays out the groups itself (the pipeline engine, whose topology's "model" axis is the
// tensor-parallel one) has checked the layers against them and passes the norm's exclusions: nothing is done.
// Throws ConfigError naming the key.
bool apply(torch::nn::Module& module, const Config& config, InitializeOptions& options);

}  // namespace deepspeed::tp
