// Shared by the config tests: the message a config is refused with.
#pragma once

#include <string>

#include "config/feature_gate.h"
#include "deepspeed/config.h"
#include "deepspeed/error.h"

namespace deepspeed::config {

// The ConfigError message Config::from_string(json) throws, or "" when the config loads.
inline std::string error_of(const std::string& json) {
  try {
    Config::from_string(json);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The ConfigError message the feature gate (check_supported_features) refuses `json` with, or "" when it passes.
inline std::string rejection(const std::string& json) {
  auto cfg = Config::from_string(json);
  try {
    check_supported_features(cfg);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace deepspeed::config
