// Shared by the config tests: the message a config is refused with.
#pragma once

#include <string>

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

}  // namespace deepspeed::config
