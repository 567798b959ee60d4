// The process-wide activation checkpointing state behind include/deepspeed/checkpointing.h: the
// settings in force, the contiguous buffers (one per device), the accounting that stats() reports
// and the profile timers.
//
// Thread-safety: every member function locks; the autograd engine may run backward on its own
// device threads.
#pragma once

#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "deepspeed/checkpointing.h"
#include "runtime/activation_checkpointing/contiguous_buffer.h"
#include "runtime/timers.h"

namespace deepspeed::checkpointing {

class CheckpointState {
 public:
  static CheckpointState& instance();

  void configure(const config::ActivationCheckpointingConfig& settings);
  config::ActivationCheckpointingConfig settings() const;
  bool configured() const;
  void reset();
  CheckpointStats stats() const;

  // The contiguous buffer for saved tensors on `device` (created with number_checkpoints slots on
  // first use).
  std::shared_ptr<ContiguousBuffer> contiguous_buffer(c10::Device device, bool pin);

  void add_saved(int64_t bytes, int64_t host_bytes);
  void remove_saved(int64_t bytes, int64_t host_bytes);
  void count_forward();
  void count_recompute();
  // Synchronizes the accelerator and counts it.
  void synchronize();

  // Profile timers that nest: only the outermost start/stop of a name is timed, so a checkpoint
  // inside a checkpoint's recomputation is counted once.
  void timer_start(const std::string& name);
  void timer_stop(const std::string& name);

 private:
  mutable std::mutex mutex_;
  config::ActivationCheckpointingConfig settings_;
  bool configured_ = false;
  std::map<std::string, std::shared_ptr<ContiguousBuffer>> buffers_;  // by device name
  CheckpointStats counters_;  // the fields not computed from buffers_
  runtime::Timers timers_;
  std::map<std::string, int> timer_depth_;
};

// Names of the profile timers (DeepSpeed's checkpointing times "forward" and "backward" the same
// way).
inline constexpr const char* kForwardTimer = "forward";
inline constexpr const char* kRecomputeTimer = "recompute";
inline constexpr const char* kBackwardTimer = "backward";

}  // namespace deepspeed::checkpointing
