// InferenceConfig (deepspeed/inference/inference_config.h): DeepSpeedInferenceConfig's keys, what is built read,
// the rest refused by name unless at DeepSpeed's default.
#include "deepspeed/inference/inference_config.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "inference/json_fields.h"

namespace deepspeed::inference {
namespace {

using json_fields::got;
using json_fields::Json;
using json_fields::value_of;

// A DeepSpeedInferenceConfig key for something not built here, and the value at which it asks for nothing.
struct Inert {
  const char* key;
  Json value;
  const char* what;
};

const std::vector<Inert>& inert_keys() {
  static const std::vector<Inert> kKeys = {
      {"enable_cuda_graph", false, "CUDA graphs"},
      {"use_triton", false, "Triton kernels"},
      {"triton_autotune", false, "Triton kernels"},
      {"triangular_masking", true, "attention without the causal mask"},
      {"zero", Json::object(), "ZeRO-Inference"},
      {"quant", Json::object(), "quantized inference"},
      {"moe", false, "MoE inference"},
      {"ep_size", 1, "expert parallelism"},
      {"moe_experts", Json::array({1}), "MoE inference"},
      {"checkpoint", nullptr,
       "a checkpoint description (load the weights with load_hf_weights or init_inference's "
       "model folder)"},
      {"base_dir", "", "a checkpoint description"},
      {"save_mp_checkpoint_path", nullptr, "saving a sharded checkpoint"},
      {"set_empty_params", false, "empty parameters"},
      {"injection_policy", nullptr, "injection policies"},
      {"injection_policy_tuple", nullptr, "injection policies"},
      {"replace_method", "auto", "a replace method"},
      {"keep_module_on_host", false, "keeping the module on the host"},
      {"transposed_mode", false, "transposed weights"},
      {"training_mp_size", 1, "a training model-parallel size"},
      {"min_out_tokens", 1, "a minimum output length"},
      {"config", nullptr, "a model config object"},
  };
  return kKeys;
}

// Keys that change nothing in how tokens come out (an output format of DeepSpeed's module): accepted.
constexpr std::array<const char*, 1> kInformational = {"return_tuple"};

void refuse_unknown_and_unbuilt(const Json& j, const std::string& source) {
  // (and the aliases kernel_inject, max_tokens)
  static const std::array<const char*, 5> kBuilt = {"dtype", "tensor_parallel", "mp_size", "max_out_tokens",
                                                    "replace_with_kernel_inject"};
  for (const auto& [key, value] : j.items()) {
    if (key == "kernel_inject" || key == "max_tokens" || std::find(kBuilt.begin(), kBuilt.end(), key) != kBuilt.end() ||
        std::find(kInformational.begin(), kInformational.end(), key) != kInformational.end())
      continue;
    const auto& keys = inert_keys();
    const auto it = std::find_if(keys.begin(), keys.end(), [&](const Inert& k) { return key == k.key; });
    DS_CHECK_T(ConfigError, it != keys.end(), source, ": unknown key ", key,
               " (built: dtype, tensor_parallel.tp_size, mp_size, max_out_tokens, replace_with_kernel_inject)");
    // A section (zero, quant) asks for nothing when empty, disabled, or (zero) at stage 0.
    const bool off_section = value.is_object() && it->value.is_object() &&
                             (value.empty() || value.value("enabled", true) == false || value.value("stage", -1) == 0);
    const bool inert = value.is_null() || value == it->value || off_section;
    DS_CHECK_T(ConfigError, inert, source, ": ", key, " ", got(value), " is not implemented (", it->what,
               "; DeepSpeed's default is ", it->value.dump(), ")");
  }
}

int read_tp_size(const Json& j, const std::string& source) {
  int64_t tp = 1;
  if (const Json* mp = value_of(j, "mp_size")) tp = json_fields::integer_of(*mp, source, "mp_size");
  if (const Json* section = value_of(j, "tensor_parallel")) {
    DS_CHECK_T(ConfigError, section->is_object(), source, ": tensor_parallel must be an object, got ", got(*section));
    for (const auto& [key, value] : section->items())
      DS_CHECK_T(ConfigError, key == "tp_size" || key == "enabled" || key == "tp_group", source,
                 ": unknown key tensor_parallel.", key, " (built: tensor_parallel.tp_size)");
    bool enabled = true;
    json_fields::read_bool(*section, source, "enabled", enabled);
    if (const Json* v = value_of(*section, "tp_size"))
      tp = json_fields::integer_of(*v, source, "tensor_parallel.tp_size");
    if (!enabled) tp = 1;
  }
  DS_CHECK_T(ConfigError, tp >= 1, source, ": tensor_parallel.tp_size must be >= 1, got ", tp);
  return static_cast<int>(tp);
}

}  // namespace

c10::ScalarType InferenceConfig::parse_dtype(const std::string& name, const std::string& source) {
  std::string n = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
  if (n == "fp32" || n == "float32" || n == "float") return c10::ScalarType::Float;
  if (n == "fp16" || n == "float16" || n == "half") return c10::ScalarType::Half;
  if (n == "bf16" || n == "bfloat16") return c10::ScalarType::BFloat16;
  throw ConfigError(source +
                    ": dtype must be fp32, fp16 or bf16 (or torch.float32, torch.float16, torch.bfloat16), "
                    "got \"" +
                    detail::printable(name) + "\"");
}

InferenceConfig InferenceConfig::from_json(const std::string& text, const std::string& source) {
  const Json j = json_fields::parse_object(text, source);
  refuse_unknown_and_unbuilt(j, source);
  InferenceConfig c;
  if (const Json* v = value_of(j, "dtype")) {
    DS_CHECK_T(ConfigError, v->is_string(), source, ": dtype must be a string such as \"bf16\", got ", got(*v));
    c.dtype = parse_dtype(v->get<std::string>(), source);
  }
  c.tp_size = read_tp_size(j, source);
  json_fields::read_integer(j, source, "max_tokens", c.max_out_tokens);  // DeepSpeed's alias
  json_fields::read_integer(j, source, "max_out_tokens", c.max_out_tokens);
  DS_CHECK_T(ConfigError, c.max_out_tokens >= 1, source, ": max_out_tokens must be >= 1, got ", c.max_out_tokens);
  json_fields::read_bool(j, source, "replace_with_kernel_inject", c.replace_with_kernel_inject);
  json_fields::read_bool(j, source, "kernel_inject", c.replace_with_kernel_inject);
  return c;
}

InferenceConfig InferenceConfig::from_file(const std::string& path) {
  return from_json(json_fields::read_text(path, "inference config"), path);
}

}  // namespace deepspeed::inference
