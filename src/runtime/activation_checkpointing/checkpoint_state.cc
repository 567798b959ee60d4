#include "runtime/activation_checkpointing/checkpoint_state.h"

#include <algorithm>

#include "config/feature_gate.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::checkpointing {

CheckpointState& CheckpointState::instance() {
  // Never destroyed: graphs still alive at exit release their segments into it.
  static auto* state = new CheckpointState();
  return *state;
}

void CheckpointState::configure(const config::ActivationCheckpointingConfig& s) {
  // DeepSpeed's configure() asserts the same preconditions (the config gate checks a config's the same way).
  if (const std::string why = config::activation_checkpointing_problem(s); !why.empty()) throw ConfigError(why);
  std::lock_guard<std::mutex> lock(mutex_);
  settings_ = s;
  configured_ = true;
  // Buffers are sized by the settings; live checkpoints keep the memory they use until they finish.
  buffers_.clear();
}

config::ActivationCheckpointingConfig CheckpointState::settings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return settings_;
}

bool CheckpointState::configured() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return configured_;
}

void CheckpointState::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.clear();
  // What live segments hold stays counted: they give it back when they finish.
  CheckpointStats kept;
  kept.live_segments = counters_.live_segments;
  kept.saved_bytes = counters_.saved_bytes;
  kept.host_saved_bytes = counters_.host_saved_bytes;
  kept.peak_saved_bytes = counters_.saved_bytes;
  counters_ = kept;
  timers_.reset();
}

CheckpointStats CheckpointState::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CheckpointStats out = counters_;
  for (const auto& [name, buffer] : buffers_) {
    out.contiguous_buffer_bytes += buffer->capacity_bytes();
    out.contiguous_slots_in_use += buffer->slots_in_use();
  }
  out.forward_ms = timers_.elapsed_ms(kForwardTimer);
  out.recompute_ms = timers_.elapsed_ms(kRecomputeTimer);
  out.backward_ms = timers_.elapsed_ms(kBackwardTimer);
  return out;
}

std::shared_ptr<ContiguousBuffer> CheckpointState::contiguous_buffer(c10::Device device, bool pin) {
  std::lock_guard<std::mutex> lock(mutex_);
  DS_ASSERT(settings_.number_checkpoints.has_value());
  std::shared_ptr<ContiguousBuffer>& slot = buffers_[device.str() + (pin ? "/pinned" : "")];
  if (!slot) slot = std::make_shared<ContiguousBuffer>(device, *settings_.number_checkpoints, pin);
  return slot;
}

void CheckpointState::add_saved(int64_t bytes, int64_t host_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.live_segments += 1;
  counters_.saved_bytes += bytes;
  counters_.host_saved_bytes += host_bytes;
  counters_.peak_saved_bytes = std::max(counters_.peak_saved_bytes, counters_.saved_bytes);
}

void CheckpointState::remove_saved(int64_t bytes, int64_t host_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.live_segments -= 1;
  counters_.saved_bytes -= bytes;
  counters_.host_saved_bytes -= host_bytes;
}

void CheckpointState::count_forward() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.forwards += 1;
}

void CheckpointState::count_recompute() {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.recomputes += 1;
}

void CheckpointState::synchronize() {
  accelerator::get_accelerator().synchronize();
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.synchronizations += 1;
}

void CheckpointState::timer_start(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timer_depth_[name]++ == 0) timers_.start(name);
}

void CheckpointState::timer_stop(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  int& depth = timer_depth_[name];
  DS_ASSERT(depth > 0, "checkpointing timer ", name, " stopped without start");
  if (--depth == 0) timers_.stop(name);
}

// The public functions of include/deepspeed/checkpointing.h that only touch the state.

void configure(const config::ActivationCheckpointingConfig& settings) {
  CheckpointState::instance().configure(settings);
}

void configure(const Config& config) { configure(config.activation_checkpointing); }

bool is_configured() { return CheckpointState::instance().configured(); }

config::ActivationCheckpointingConfig settings() { return CheckpointState::instance().settings(); }

void reset() { CheckpointState::instance().reset(); }

CheckpointStats stats() { return CheckpointState::instance().stats(); }

}  // namespace deepspeed::checkpointing
