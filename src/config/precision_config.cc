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

const Section<Fp16Config>& fp16_section() {
  using C = Fp16Config;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          bool_key<C>("enabled", &C::enabled, "train in fp16 with loss scaling; \"auto\": from the model's dtype",
                      AutoPolicy::kAllowAuto),
          bool_key<C>("auto_cast", &C::auto_cast, "cast the model's inputs to fp16: refused when true"),
          number_key<C>("loss_scale", &C::loss_scale, 0.0, std::numeric_limits<double>::infinity(),
                        "a fixed loss scale; 0: dynamic"),
          int_key<C, int>("initial_scale_power", &C::initial_scale_power, 0, 127, "the dynamic scale starts at 2^N"),
          int_key<C, int>("loss_scale_window", &C::loss_scale_window, 1,
                          "steps without overflow before the scale doubles"),
          int_key<C, int>("hysteresis", &C::hysteresis, 1, "overflows tolerated before the scale halves"),
          bool_key<C>("consecutive_hysteresis", &C::consecutive_hysteresis,
                      "refill the hysteresis after each step without overflow"),
          number_key<C>("min_loss_scale", &C::min_loss_scale, 0.0, std::numeric_limits<double>::infinity(),
                        "the dynamic scale's floor"),
          bool_key<C>("fp16_master_weights_and_grads", &C::fp16_master_weights_and_grads,
                      "keep the optimizer's masters and gradients in fp16 (needs offload_optimizer)"),
      });
  return kSection;
}

const Section<Bf16Config>& bf16_section() {
  using C = Bf16Config;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          custom_key<C>(
              "enabled", "bool", "train in bf16; \"auto\": from the model's dtype",
              [](ObjectReader& r, const std::string& key, C& c) {
                std::set<std::string>* autos = r.autos();
                // "auto" under the old section name is recorded under the current one, which dump() writes.
                if (!r.read_bool(key, &c.enabled, AutoPolicy::kAllowAuto) && autos && autos->erase(r.path_of(key)))
                  autos->insert("bf16.enabled");
              },
              [](const C& c) { return std::optional<OrderedJson>(c.enabled); }, /*accepts_auto=*/true),
          // DeepSpeed's BF16_Optimizer folds each micro-step's gradient into its fp32 accumulator at once when true,
          // else at the step from a bf16 sum; here gradients accumulate in fp32 as they arrive unless
          // data_types.grad_accum_dtype says bf16, so true is what runs already.
          bool_key<C>("immediate_grad_update", &C::immediate_grad_update,
                      "no effect: gradients already accumulate in fp32 as they arrive (unless grad_accum_dtype is "
                      "bf16)"),
          bool_key<C>(
              "check_grad_overflow", &C::check_grad_overflow,
              "at stages 1-2: skip a step whose gradients hold inf/NaN (false steps on); other stages always skip, as "
              "DeepSpeed"),
          bool_key<C>("bf16_master_weights_and_grads", &C::bf16_master_weights_and_grads,
                      "keep the optimizer's masters and gradients in bf16"),
          bool_key<C>("bf16_optimizer_states", &C::bf16_optimizer_states,
                      "keep the optimizer's states in bf16 (needs bf16_master_weights_and_grads)"),
      },
      [](ObjectReader& r, C& c) {
        if (c.bf16_optimizer_states && !c.bf16_master_weights_and_grads)
          fail_at(r.path_of("bf16_optimizer_states"), "needs bf16_master_weights_and_grads: true");
      });
  return kSection;
}

namespace {

// A data type key (null: unset), dumped by its name.
Field<DataTypesConfig> data_type_key(std::string name, std::optional<DataType> DataTypesConfig::*m, std::string ours) {
  return custom_key<DataTypesConfig>(
      std::move(name), "one of fp16, bf16, fp32 (any case) or null", std::move(ours),
      [m](ObjectReader& r, const std::string& key, DataTypesConfig& c) {
        const Json* v = r.find(key);
        if (v && !v->is_null()) c.*m = parse_data_type(*v, r.path_of(key));
      },
      [m](const DataTypesConfig& c) {
        return std::optional<OrderedJson>(c.*m ? OrderedJson(to_string(*(c.*m))) : OrderedJson(nullptr));
      });
}

}  // namespace

const Section<DataTypesConfig>& data_types_section() {
  using C = DataTypesConfig;
  static const Section<C> kSection(
      SectionKind::kDict, {
                              data_type_key("grad_accum_dtype", &C::grad_accum_dtype,
                                            "the dtype gradients accumulate in over micro-batches"),
                              data_type_key("param_dtype", &C::param_dtype, "refused unless the training dtype"),
                              data_type_key("buffer_dtype", &C::buffer_dtype, "refused when set"),
                              custom_key<C>(
                                  "keep_in_fp32_modules", "\"auto\" or a list of strings",
                                  "\"auto\" or []: nothing kept (a C++ model has no list); a non-empty list is refused",
                                  [](ObjectReader& r, const std::string& key, C& c) {
                                    const Json* k = r.find(key);
                                    if (!k || (k->is_string() && k->get<std::string>() == "auto")) return;
                                    if (!k->is_array())
                                      fail_at(r.path_of(key), "must be \"auto\" or a list of name patterns");
                                    std::vector<std::string> patterns;
                                    r.read_string_list(key, &patterns);
                                    c.keep_in_fp32_modules = std::move(patterns);
                                  },
                                  // Unset is DeepSpeed's literal "auto" (not a placeholder to fill): left out, so a
                                  // dump holds no "auto" of its own.
                                  [](const C& c) -> std::optional<OrderedJson> {
                                    if (!c.keep_in_fp32_modules) return std::nullopt;
                                    return OrderedJson(*c.keep_in_fp32_modules);
                                  }),
                          });
  return kSection;
}

}  // namespace deepspeed::config
