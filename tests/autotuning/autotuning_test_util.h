// Helpers shared by the autotuning tests: small search inputs and error capture.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autotuning/autotuning.h"
#include "deepspeed/error.h"

namespace deepspeed::autotuning::testing {

// Ψ = 1e6 fp32 parameters on 4 ranks, no memory limit, micro batches 1..8 all kept.
inline SearchInputs small_inputs() {
  SearchInputs in;
  in.world_size = 4;
  in.num_params = 1000000;
  in.autotuning.max_train_micro_batch_size_per_gpu = 8;
  in.autotuning.num_tuning_micro_batch_sizes = 10;
  return in;
}

// The message of the deepspeed::Error `fn` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The same, but only a ConfigError counts.
inline std::string config_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

inline std::vector<std::string> names(const std::vector<Candidate>& candidates) {
  std::vector<std::string> out;
  for (const Candidate& c : candidates) out.push_back(c.name());
  return out;
}

inline std::vector<std::string> names(const std::vector<TrialResult>& results) {
  std::vector<std::string> out;
  for (const TrialResult& r : results) out.push_back(r.candidate.name());
  return out;
}

}  // namespace deepspeed::autotuning::testing
