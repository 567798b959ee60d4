// Milliseconds since a point in time: how long the stages kept the training thread waiting (Stage3Stats,
// GradReducer::blocked_ms).
#pragma once

#include <chrono>

namespace deepspeed::zero {

inline double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace deepspeed::zero
