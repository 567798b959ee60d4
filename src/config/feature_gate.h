// Rejects, at initialize(), every config feature this build parses but does not implement yet, with a message
// naming the key and the work that will bring it. Nothing in a config is ever silently ignored.
#pragma once

#include "deepspeed/config.h"

namespace deepspeed::config {

// Throws ConfigError for the first unsupported feature that `cfg` turns on.
void check_supported_features(const config::Config& cfg);

// pipe::initialize's rules for the config alone (ZeRO stage 0-1, the pipeline section's keys that belong to the
// PipelineModule, features the pipeline engine lacks); its stage engines then run the gate above without the
// pipeline section.
void check_pipeline_features(const config::Config& cfg);

// What the engines refuse from the config alone, as ds_check_config checks it: a pipeline config (pipeline.stages
// > 1, or a pipeline key only a PipelineModule takes) by pipe::initialize's rules and its stage engines' gate, any
// other by deepspeed::initialize's gate. The engines check more once they see the model and the optimizer's
// parameters.
void check_config_alone(const config::Config& cfg);

}  // namespace deepspeed::config
