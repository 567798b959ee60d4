// fp16 loss scaling with DeepSpeed's semantics (deepspeed/runtime/fp16/loss_scaler.py).
//
// The engine multiplies the loss by loss_scale() before backward, divides the gradients by it
// before the optimizer, and calls update() once per optimizer step with whether any rank saw an
// inf/NaN gradient (it all-reduces that flag first, so every rank takes the same decision and keeps
// the same scale).
//
// Dynamic scaling (`fp16.loss_scale` 0) follows DeepSpeed's DynamicLossScaler state machine
// exactly:
//  - an overflow with hysteresis left only spends one unit of hysteresis (DeepSpeed's
//  `delayed_shift`); once
//    the hysteresis counter is down to 1, an overflow divides the scale by scale_factor, never
//    below min_loss_scale; an overflow while the scale already sits at min_loss_scale throws
//    (DeepSpeed's `raise_error_at_min_scale`) instead of skipping steps forever;
//  - a clean step grows the scale by scale_factor when `loss_scale_window` steps have passed since
//  the last
//    overflow (counted as (cur_iter - last_overflow_iter) % window == 0); that growth also refills
//    the hysteresis counter, or, with consecutive_hysteresis, every clean step refills it.
// Static scaling (`fp16.loss_scale` > 0) never changes the scale, but an overflow still skips the
// step: DeepSpeed's fp16 and ZeRO optimizers check gradients for inf/NaN and skip regardless of the
// scaler's kind (they log "Grad overflow ... Using static loss scale"), because applying an inf/NaN
// update would destroy the weights.
//
// Not thread-safe: one scaler per engine, driven from the training thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace deepspeed::runtime {

// The fp16 config section's loss-scaling keys, with DeepSpeed's defaults. The engine fills this
// from the config.
struct LossScalerOptions {
  double loss_scale = 0;         // 0 = dynamic; > 0 = static scale
  int initial_scale_power = 16;  // dynamic scaling starts at 2^initial_scale_power
  int loss_scale_window = 1000;  // clean steps since the last overflow before the scale grows
  int hysteresis = 2;  // overflows tolerated before the scale drops (DeepSpeed's delayed_shift)
  bool consecutive_hysteresis = false;  // refill hysteresis on every clean step, not only on growth
  double min_loss_scale = 1;
  double scale_factor = 2;  // not a config key in DeepSpeed; kept here so the constant has one home
  bool raise_error_at_min_scale = true;  // DeepSpeed's default; false keeps skipping at the minimum
};

// Throws deepspeed::ConfigError naming `fp16.<key>` for a value DeepSpeed would not train with.
void validate(const LossScalerOptions& options);

class LossScaler {
 public:
  // What a checkpoint must carry to resume the same scale schedule (DeepSpeed stores cur_scale,
  // cur_iter, last_overflow_iter; cur_hysteresis and skipped_steps are what our resume additionally
  // needs to be exact).
  struct State {
    double cur_scale = 1;
    int64_t cur_iter = 0;
    int64_t last_overflow_iter = -1;
    int cur_hysteresis = 1;
    int64_t skipped_steps = 0;
  };

  // Validates `options` (see validate()).
  explicit LossScaler(const LossScalerOptions& options);

  double loss_scale() const { return cur_scale_; }
  bool dynamic() const { return dynamic_; }
  const LossScalerOptions& options() const { return options_; }

  // Call once per optimizer step with whether any rank saw inf/NaN gradients. Returns true when the
  // step must be skipped (exactly when `overflow` is true), after adjusting the scale and recording
  // last_message(). `overflow_param` names the first parameter whose gradient overflowed, for the
  // log (may be empty). Throws deepspeed::Error when a dynamic scale at min_loss_scale overflows
  // again and raise_error_at_min_scale is set; the state is then left as it was before the call.
  bool update(bool overflow, const std::string& overflow_param = "");

  // Steps skipped because of overflow since construction (or as restored by load_state()).
  int64_t skipped_steps() const { return skipped_steps_; }
  // Optimizer steps seen by update(), skipped ones included.
  int64_t cur_iter() const { return cur_iter_; }
  // The log line for the last skipped step, e.g. "OVERFLOW! skipping step 12: gradient of
  // 'blocks.0.fc.weight' is inf/nan; loss scale 65536 -> 32768"; empty until a step is skipped.
  const std::string& last_message() const { return last_message_; }

  State state() const;
  // Throws deepspeed::Error naming the field when `state` cannot come from this configuration.
  void check_state(const State& state) const;
  void load_state(const State& state);  // check_state, then the state in

 private:
  LossScalerOptions options_;
  bool dynamic_;
  double cur_scale_;
  int64_t cur_iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int cur_hysteresis_;
  int64_t skipped_steps_ = 0;
  std::string last_message_;
};

}  // namespace deepspeed::runtime
