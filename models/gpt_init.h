// Pieces models/gpt.cc and models/gpt_pipe.cc share: the configuration check, dropout that is free
// when off, and GPT-2's weight initialisation.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <ATen/core/Generator.h>

#include <cstdint>
#include <optional>

#include "gpt.h"

namespace deepspeed::models {

// Throws std::invalid_argument naming the first bad field.
void check_config(const GPTConfig& c);

at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training);

// GPT-2's scheme: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2 *
// layers); LayerNorms keep weight 1, bias 0. Draws in the order of module.named_parameters(), from `generator`
// (default: the global one).
void init_gpt_weights(torch::nn::Module& module, int64_t layers,
                      std::optional<at::Generator> generator = std::nullopt);

// The generator layer `layer_index` of the pipeline layer list (gpt_pipe.h) draws its initial values from: seeded
// with cfg.init_seed + layer_index, or nullopt (the global generator) when cfg.init_seed is unset. GPT and
// gpt_pipeline_layers both initialise through it, so they build the same model.
std::optional<at::Generator> layer_generator(const GPTConfig& cfg, int64_t layer_index);

}  // namespace deepspeed::models
