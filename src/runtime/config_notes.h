// What initialize() says about the config before it builds anything, and what it reads from the model for the
// config's "auto" values.
#pragma once

#include <torch/nn/module.h>

#include <optional>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::runtime {

// The model's dtype as the config names it ("auto" fp16/bf16 follow it, as the Trainer's --fp16/--bf16 would):
// any bf16 (or fp16) parameter makes it that, whatever fp32 modules it keeps; none at all leaves it unknown.
// ConfigError when it has both bf16 and fp16 parameters.
std::optional<config::DataType> model_data_type(const torch::nn::Module& module);

// What the config parse went on past (keys DeepSpeed ignores) and how each "auto" was filled: one line each on
// stderr, on rank 0, as ds_check_config prints them.
void print_config_notes(const Config& config, const std::vector<config::AutoResolution>& filled);

}  // namespace deepspeed::runtime
