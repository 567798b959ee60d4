// Mixed precision sections: `fp16` (with its dynamic loss-scaling knobs), `bf16` (also accepted
// under its old name `bfloat16`), `data_types`, and the data-type enum shared with
// `communication_data_type`. Defaults equal DeepSpeed's. fp16 and bf16 both enabled is a
// ConfigError.
#pragma once

#include <optional>
#include <string>

namespace deepspeed::config {

enum class DataType { kFp16, kBf16, kFp32 };
const char* to_string(DataType type);  // "fp16", "bf16", "fp32"

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0.0;  // 0 selects dynamic loss scaling
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  bool fp16_master_weights_and_grads = false;

  bool dynamic_loss_scale() const { return loss_scale == 0.0; }
};

struct Bf16Config {
  bool enabled = false;
  bool immediate_grad_update = false;
  bool check_grad_overflow = true;  // DeepSpeed's default: skip a bf16 step with inf/NaN gradients (read at stages 1-2)
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;
};

struct DataTypesConfig {
  std::optional<DataType> grad_accum_dtype;  // unset: follows the model's precision
  // DeepSpeed 0.19's FSDP-like keys. param_dtype must name the training dtype (or be unset), buffer_dtype be
  // unset, keep_in_fp32_modules be "auto" (unset: a C++ model has no transformers list to read) or empty: the
  // other values are refused, not implemented.
  std::optional<DataType> param_dtype;
  std::optional<DataType> buffer_dtype;
  std::optional<std::vector<std::string>> keep_in_fp32_modules;  // unset: "auto"
};

}  // namespace deepspeed::config
