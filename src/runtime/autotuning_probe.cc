// See autotuning_probe.h.
#include "runtime/autotuning_probe.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "deepspeed/accelerator.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/profiling/flops_profiler.h"

namespace deepspeed::runtime {

namespace {

void write_text(const std::string& path, const std::string& text) {
  checkpoint::write_file_atomic(path, text.data(), text.size());
}

}  // namespace

std::unique_ptr<AutotuningProbe> AutotuningProbe::create(
    const config::AutotuningConfig& config, int64_t train_batch_size, bool writer,
    std::shared_ptr<torch::nn::Module> module) {
  const bool model_info = config.model_info.has_value() && config.model_info->profile;
  if (!config.enabled || (!config.metric_path.has_value() && !model_info)) return nullptr;
  DS_CHECK(!model_info || config.model_info_path.has_value(),
           "autotuning.model_info.profile needs autotuning.model_info_path (where to write the "
           "model's size)");
  return std::make_unique<AutotuningProbe>(config, train_batch_size, writer, std::move(module));
}

AutotuningProbe::AutotuningProbe(const config::AutotuningConfig& config, int64_t train_batch_size,
                                 bool writer, std::shared_ptr<torch::nn::Module> module)
    : config_(config),
      train_batch_size_(train_batch_size),
      writer_(writer),
      module_(std::move(module)) {}

AutotuningProbe::~AutotuningProbe() = default;

void AutotuningProbe::report_model_info(int64_t num_params, int64_t trainable_num_params) {
  if (!writer_ || !config_.model_info.has_value() || !config_.model_info->profile) return;
  nlohmann::ordered_json j;
  j["num_params"] = num_params;
  j["trainable_num_params"] = trainable_num_params;
  write_text(*config_.model_info_path, j.dump() + "\n");
}

void AutotuningProbe::begin_forward(int64_t global_steps) {
  // Count the forwards of the step just before the window (all its micro-batches): counting is
  // slow and must not be timed.
  if (!writer_ || done_ || config_.metric != "flops" || !config_.metric_path.has_value()) return;
  if (forward_flops_counted_ || global_steps + 1 < config_.start_profile_step) return;
  if (!flops_) {
    flops_ = std::make_unique<profiling::FlopsProfiler>(module_);
    counting_step_ = global_steps;
    try {
      flops_->start_profile();
    } catch (const std::exception& e) {  // another profiler (flops_profiler) counts this step
      std::fprintf(stderr, "deepspeed: autotuning: cannot count flops: %s\n", e.what());
      flops_.reset();
      forward_flops_counted_ = true;
      return;
    }
  } else if (global_steps != counting_step_) {
    return;
  } else {
    flops_->continue_profile();
  }
  counting_ = true;
}

void AutotuningProbe::end_forward() {
  if (!counting_) return;
  flops_->stop_profile();
  forward_flops_ = flops_->get_total_flops();
  counting_ = false;
}

void AutotuningProbe::after_step(int64_t global_steps) {
  if (done_ || !config_.metric_path.has_value()) return;
  if (flops_ && global_steps > counting_step_ && !forward_flops_counted_) {
    forward_flops_counted_ = true;  // the counted step is over
    flops_->end_profile();
  }
  // The window opens at the first step at or past start_profile_step (a resumed run may begin
  // past it) and spans end - start steps from there.
  if (!window_open_) {
    if (global_steps < config_.start_profile_step) return;
    accelerator::get_accelerator().synchronize();
    window_start_ = std::chrono::steady_clock::now();
    window_first_step_ = global_steps;
    window_open_ = true;
    return;
  }
  const int64_t steps = global_steps - window_first_step_;
  if (steps < config_.end_profile_step - config_.start_profile_step) return;
  accelerator::get_accelerator().synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start_).count();
  done_ = true;
  if (writer_) write_metrics(seconds, steps);
}

void AutotuningProbe::write_metrics(double seconds, int64_t steps) {
  const double latency = seconds / static_cast<double>(steps);
  nlohmann::ordered_json j;
  j["throughput"] = static_cast<double>(train_batch_size_) / latency;
  j["latency"] = latency;
  j["FLOPS_per_gpu"] =
      forward_flops_ > 0 ? 3.0 * static_cast<double>(forward_flops_) / latency : 0.0;
  j["start_profile_step"] = config_.start_profile_step;
  j["end_profile_step"] = config_.end_profile_step;
  j["first_step"] = window_first_step_;  // the window: steps first_step+1 .. first_step+steps
  j["steps"] = steps;
  j["train_batch_size"] = train_batch_size_;
  write_text(*config_.metric_path, j.dump() + "\n");
}

}  // namespace deepspeed::runtime
