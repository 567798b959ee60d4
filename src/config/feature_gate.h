// Rejects, at initialize(), every config feature this build parses but does not implement yet, with a message
// naming the key and the work that will bring it. Nothing in a config is ever silently ignored.
#pragma once

#include "deepspeed/config.h"

namespace deepspeed::config {

// Throws ConfigError for the first unsupported feature that `cfg` turns on.
void check_supported_features(const config::Config& cfg);

}  // namespace deepspeed::config
