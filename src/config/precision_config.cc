// fp16, bf16 and data_types: parse, validate and dump (DeepSpeed's runtime/precision_config.py).
#include "config/sections.h"
#include "config/suggest.h"

namespace deepspeed::config {

const char* to_string(DataType type) {
  switch (type) {
    case DataType::kFp16:
      return "fp16";
    case DataType::kBf16:
      return "bf16";
    case DataType::kFp32:
      return "fp32";
  }
  return "fp32";
}

DataType parse_data_type(const Json& value, const std::string& path) {
  const char kExpected[] = "expected one of fp16, bf16, fp32, got ";
  if (!value.is_string()) fail_at(path, kExpected + describe(value));
  const std::string s = to_lower(value.get<std::string>());
  if (s == "fp16") return DataType::kFp16;
  if (s == "bf16") return DataType::kBf16;
  if (s == "fp32") return DataType::kFp32;
  fail_at(path, kExpected + describe(value));
}

Fp16Config parse_fp16_config(const Json& node, std::set<std::string>* autos) {
  ObjectReader r(node, "fp16", autos);
  r.take_string_booleans();
  Fp16Config c;
  r.read_bool("enabled", &c.enabled, AutoPolicy::kAllowAuto);
  r.read_bool("auto_cast", &c.auto_cast);
  r.read_number("loss_scale", &c.loss_scale, 0.0);
  r.read_int("initial_scale_power", &c.initial_scale_power, 0, 127);
  r.read_int("loss_scale_window", &c.loss_scale_window, 1);
  r.read_int("hysteresis", &c.hysteresis, 1);
  r.read_bool("consecutive_hysteresis", &c.consecutive_hysteresis);
  r.read_number("min_loss_scale", &c.min_loss_scale, 0.0);
  r.read_bool("fp16_master_weights_and_grads", &c.fp16_master_weights_and_grads);
  r.finish();
  return c;
}

OrderedJson dump_fp16_config(const Fp16Config& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["auto_cast"] = c.auto_cast;
  j["loss_scale"] = c.loss_scale;
  j["initial_scale_power"] = c.initial_scale_power;
  j["loss_scale_window"] = c.loss_scale_window;
  j["hysteresis"] = c.hysteresis;
  j["consecutive_hysteresis"] = c.consecutive_hysteresis;
  j["min_loss_scale"] = c.min_loss_scale;
  j["fp16_master_weights_and_grads"] = c.fp16_master_weights_and_grads;
  return j;
}

Bf16Config parse_bf16_config(const Json& node, const std::string& path,
                             std::set<std::string>* autos) {
  ObjectReader r(node, path, autos);
  r.take_string_booleans();
  Bf16Config c;
  if (!r.read_bool("enabled", &c.enabled, AutoPolicy::kAllowAuto) && autos &&
      autos->erase(path + ".enabled")) {
    autos->insert("bf16.enabled");  // dump() writes the current key name
  }
  r.read_bool("immediate_grad_update", &c.immediate_grad_update);
  r.read_bool("check_grad_overflow", &c.check_grad_overflow);
  r.read_bool("bf16_master_weights_and_grads", &c.bf16_master_weights_and_grads);
  r.read_bool("bf16_optimizer_states", &c.bf16_optimizer_states);
  r.finish();
  if (c.bf16_optimizer_states && !c.bf16_master_weights_and_grads) {
    fail_at(r.path_of("bf16_optimizer_states"), "needs bf16_master_weights_and_grads: true");
  }
  return c;
}

OrderedJson dump_bf16_config(const Bf16Config& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["immediate_grad_update"] = c.immediate_grad_update;
  j["check_grad_overflow"] = c.check_grad_overflow;
  j["bf16_master_weights_and_grads"] = c.bf16_master_weights_and_grads;
  j["bf16_optimizer_states"] = c.bf16_optimizer_states;
  return j;
}

DataTypesConfig parse_data_types_config(const Json& node) {
  ObjectReader r(node, "data_types", nullptr);
  DataTypesConfig c;
  const Json* v = r.find("grad_accum_dtype");
  if (v && !v->is_null()) c.grad_accum_dtype = parse_data_type(*v, r.path_of("grad_accum_dtype"));
  if (const Json* p = r.find("param_dtype"); p && !p->is_null()) {
    c.param_dtype = parse_data_type(*p, r.path_of("param_dtype"));
  }
  if (const Json* b = r.find("buffer_dtype"); b && !b->is_null()) {
    c.buffer_dtype = parse_data_type(*b, r.path_of("buffer_dtype"));
  }
  if (const Json* k = r.find("keep_in_fp32_modules"); k && !(k->is_string() && k->get<std::string>() == "auto")) {
    std::vector<std::string> patterns;
    if (!k->is_array()) fail_at(r.path_of("keep_in_fp32_modules"), "must be \"auto\" or a list of name patterns");
    r.read_string_list("keep_in_fp32_modules", &patterns);
    c.keep_in_fp32_modules = std::move(patterns);
  }
  r.finish_ignoring_unknown();
  return c;
}

OrderedJson dump_data_types_config(const DataTypesConfig& c) {
  OrderedJson j;
  j["grad_accum_dtype"] =
      c.grad_accum_dtype ? OrderedJson(to_string(*c.grad_accum_dtype)) : OrderedJson(nullptr);
  j["param_dtype"] = c.param_dtype ? OrderedJson(to_string(*c.param_dtype)) : OrderedJson(nullptr);
  j["buffer_dtype"] = c.buffer_dtype ? OrderedJson(to_string(*c.buffer_dtype)) : OrderedJson(nullptr);
  // Unset is DeepSpeed's literal "auto" (not a placeholder to fill): left out, so a dump holds no "auto" of its own.
  if (c.keep_in_fp32_modules) j["keep_in_fp32_modules"] = *c.keep_in_fp32_modules;
  return j;
}

}  // namespace deepspeed::config
