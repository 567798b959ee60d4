// The feature gate's rules on precision, the gradient norm and the optimizer (feature_gate.h), each a Rule with an
// example config it refuses. Order matters: a rule may assume the ones before it passed.
#include <string>

#include "config/feature_gate.h"
#include "deepspeed/error.h"

namespace deepspeed::config {
namespace {

using ::deepspeed::detail::str_cat;

// bf16.bf16_master_weights_and_grads (and bf16_optimizer_states), fp16.fp16_master_weights_and_grads: gradients,
// masters (and bf16 optimizer states) kept in the model's 16-bit dtype, stepped in fp32 a chunk at a time.
// DeepSpeed's rules: ZeRO stages 1-3; fp16 masters always with ZeRO-Offload (its CPU Adam keeps fp32 states); bf16
// ones without it only with bf16 states.
std::vector<Rule> master_rules(bool bf16) {
  const std::string dtype = bf16 ? "bf16" : "fp16";
  const std::string key = dtype + "." + dtype + "_master_weights_and_grads";
  auto on = [bf16](const Config& c) {
    return bf16 ? c.bf16.bf16_master_weights_and_grads : c.fp16.fp16_master_weights_and_grads;
  };
  // A section with the masters on (and bf16's states with them, which the parser requires).
  const std::string masters = R"(")" + dtype + R"(": {"enabled": true, ")" + dtype +
                              R"(_master_weights_and_grads": true)" +
                              (bf16 ? R"(, "bf16_optimizer_states": true})" : "}");
  const std::string offload = bf16 ? "" : R"(, "offload_optimizer": {"device": "cpu"})";
  std::vector<Rule> rules = {
      make_rule(
          key, "without " + dtype + ".enabled",
          bf16 ? R"({"bf16": {"bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}, )"
                 R"("zero_optimization": {"stage": 1}})"
               : R"({"fp16": {"fp16_master_weights_and_grads": true}, )"
                 R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})",
          [on, bf16](const Config& c) { return on(c) && !(bf16 ? c.bf16.enabled : c.fp16.enabled); },
          key + ": needs " + dtype + ".enabled true (the masters are the model's " + dtype + " weights)"),
      make_rule(
          key, "at stage 0", "{" + masters + "}", [on](const Config& c) { return on(c) && c.zero.stage == 0; },
          [key](const Config& c) {
            return str_cat(key, ": needs zero_optimization.stage 1, 2 or 3, got ", c.zero.stage);
          }),
  };
  if (bf16) {
    rules.push_back(make_rule(
        key, "without `bf16_optimizer_states` unless the optimizer is offloaded (as DeepSpeed)",
        R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, )"
        R"("zero_optimization": {"stage": 1}})",
        [on](const Config& c) { return on(c) && !c.zero.offload_optimizer.enabled() && !c.bf16.bf16_optimizer_states; },
        key + ": without ZeRO-Offload the optimizer states must be bf16 too: set "
              "bf16.bf16_optimizer_states true (as DeepSpeed requires; with offload_optimizer "
              "\"cpu\" or \"nvme\" they may stay fp32)"));
    // (fp16 with ZenFlow is refused before, whatever its masters.)
    rules.push_back(make_rule(
        key, "with ZenFlow",
        R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, )"
        R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {}}})",
        [on](const Config& c) { return on(c) && c.zero.zenflow.has_value(); },
        key + ": ZenFlow selects and steps on fp32 gradients; not supported with it"));
  } else {
    rules.push_back(make_rule(
        key, "without `offload_optimizer` (as DeepSpeed)", "{" + masters + R"(, "zero_optimization": {"stage": 2}})",
        [on](const Config& c) { return on(c) && !c.zero.offload_optimizer.enabled(); },
        key + ": needs zero_optimization.offload_optimizer.device \"cpu\" or \"nvme\" (as DeepSpeed "
              "requires: the CPU optimizer keeps fp32 states beside the fp16 masters)"));
  }
  const DataType model = bf16 ? DataType::kBf16 : DataType::kFp16;
  rules.push_back(make_rule(
      key, "with `data_types.grad_accum_dtype` other than " + dtype,
      "{" + masters + R"(, "zero_optimization": {"stage": 1)" + offload +
          R"(}, "data_types": {"grad_accum_dtype": "fp32"}})",
      [on, model](const Config& c) {
        return on(c) && c.data_types.grad_accum_dtype && *c.data_types.grad_accum_dtype != model;
      },
      [key, dtype](const Config& c) {
        return str_cat(key, ": the gradients are ", dtype, " with it, but data_types.grad_accum_dtype says ",
                       to_string(*c.data_types.grad_accum_dtype), "; leave grad_accum_dtype unset or ", dtype);
      }));
  return rules;
}

// zero_optimization.compute_grad_norm false: no global norm at the step, so nothing may need one. DeepSpeed 0.19's
// rules, so a config moves between the two unchanged.
std::vector<Rule> grad_norm_rules() {
  const std::string k = "zero_optimization.compute_grad_norm";
  const std::string key = k + " false";
  auto off = [](const Config& c) { return !c.zero.compute_grad_norm; };
  return {
      make_rule(
          k, "false other than at stage 1 or 2", zero_example(R"("stage": 3, "compute_grad_norm": false)"),
          [off](const Config& c) { return off(c) && c.zero.stage != 1 && c.zero.stage != 2; },
          [key](const Config& c) {
            return str_cat(key, ": supported only at ZeRO stage 1 or 2 (as in DeepSpeed), got stage ", c.zero.stage);
          }),
      make_rule(
          k, "false with clipping", zero_example(R"("stage": 2, "compute_grad_norm": false)"),
          [off](const Config& c) { return off(c) && c.gradient_clipping != 0.0; },
          [key](const Config& c) {
            return str_cat(key,
                           ": clipping needs the norm; set gradient_clipping 0 (absent, it is DeepSpeed's "
                           "default 1.0), got ",
                           c.gradient_clipping);
          }),
      // (This covers ZenFlow too, which DeepSpeed also refuses here: it needs optimizer offload.)
      make_rule(
          k, "false with optimizer offload",
          R"({"gradient_clipping": 0, "zero_optimization": {"stage": 2, "compute_grad_norm": false, )"
          R"("offload_optimizer": {"device": "cpu"}}})",
          [off](const Config& c) { return off(c) && c.zero.offload_optimizer.enabled(); },
          key + ": not supported with optimizer offload (as in DeepSpeed)"),
      make_rule(
          k, "false at stage 1 with bf16 and `grad_accum_dtype` fp32",
          R"({"gradient_clipping": 0, "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}, )"
          R"("zero_optimization": {"stage": 1, "compute_grad_norm": false}})",
          [off](const Config& c) {
            return off(c) && c.zero.stage == 1 && c.bf16.enabled && c.data_types.grad_accum_dtype &&
                   *c.data_types.grad_accum_dtype == DataType::kFp32;
          },
          key + ": not supported at stage 1 with bf16 parameters and data_types.grad_accum_dtype fp32 (DeepSpeed "
                "runs that combination on its BF16 optimizer, which always computes the norm)"),
  };
}

// The optimizer section's type against the rest of the config (a client optimizer is checked at initialize).
const char* whole_tensor_clash(const Config& c) {
  const OffloadOptimizerConfig& oo = c.zero.offload_optimizer;
  return oo.device == OffloadDevice::kNvme ? "zero_optimization.offload_optimizer.device nvme"
         : oo.overlap_step                 ? "zero_optimization.offload_optimizer.overlap_step"
         : oo.super_offload                ? "zero_optimization.offload_optimizer.super_offload"
                                           : nullptr;  // (ZenFlow refused them already: it steps with AdamW)
}

std::vector<Rule> optimizer_rules() {
  auto type = [](const Config& c) { return c.optimizer ? c.optimizer->type : std::string(); };
  return {
      // Older DeepSpeed configs name them (the parser reads their keys); 0.19 has none to cross checkpoints with.
      make_rule(
          "optimizer.type", "`OneBitAdam`, `ZeroOneAdam`, `OneBitLamb`",
          R"({"optimizer": {"type": "OneBitAdam", "params": {"lr": 0.001}}})",
          [type](const Config& c) {
            return type(c) == "onebitadam" || type(c) == "zerooneadam" || type(c) == "onebitlamb";
          },
          [type](const Config& c) {
            return "optimizer.type: '" + type(c) +
                   "' (DeepSpeed's 1-bit Adam, 0/1 Adam and 1-bit LAMB) is not supported: DeepSpeed itself removed "
                   "its 1-bit optimizers; use Adam, AdamW or Lamb";
          }),
      // LAMB's trust ratio and Muon's Newton-Schulz need each tensor whole at the step: the state in memory (no
      // slice-wise nvme step) and no step running beside the next iteration's collectives. (What only the model
      // shows, expert- or tensor-parallel tensors, the optimizer step's factory checks with the same message.)
      make_rule(
          "optimizer.type", "Lamb or Muon with nvme optimizer offload, `overlap_step` or SuperOffload",
          R"({"optimizer": {"type": "Lamb", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 2, )"
          R"("offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}})",
          [type](const Config& c) {
            return (type(c) == "lamb" || type(c) == "muon") && whole_tensor_clash(c) != nullptr;
          },
          [type](const Config& c) { return whole_tensor_message(type(c), whole_tensor_clash(c)); }),
  };
}

// The reduction op and the gradient accumulation dtype.
std::vector<Rule> reduction_rules() {
  const std::string cpu_zenflow = R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {})";
  auto sum = [](const Config& c) { return c.gradient_allreduce_op == "sum"; };
  // data_types.grad_accum_dtype: fp32, or the model's own 16-bit dtype (zero/flat_params.h, stage3.h). Unset, we
  // accumulate in fp32 (DeepSpeed accumulates a bf16 model's gradients in bf16 unless told fp32).
  auto accum16 = [](const Config& c) {
    return c.data_types.grad_accum_dtype && *c.data_types.grad_accum_dtype != DataType::kFp32;
  };
  auto model = [](const Config& c) {
    return c.bf16.enabled ? DataType::kBf16 : c.fp16.enabled ? DataType::kFp16 : DataType::kFp32;
  };
  auto accum_key = [](const Config& c) {
    return str_cat("data_types.grad_accum_dtype \"", to_string(*c.data_types.grad_accum_dtype), "\"");
  };
  return {
      // gradient_allreduce_op "sum": stages 0-2 reduce without averaging; DeepSpeed refuses it at stage 3 and with
      // ZenFlow, and so do we.
      make_rule(
          "gradient_allreduce_op", "\"sum\" at stage 3",
          R"({"gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}})",
          [sum](const Config& c) { return sum(c) && c.zero.stage == 3; },
          "gradient_allreduce_op \"sum\": not supported at ZeRO stage 3 (as in DeepSpeed); use \"mean\""),
      make_rule(
          "gradient_allreduce_op", "\"sum\" with ZenFlow",
          R"({"gradient_allreduce_op": "sum", "zero_optimization": {)" + cpu_zenflow + "}}",
          [sum](const Config& c) { return sum(c) && c.zero.zenflow.has_value(); },
          "gradient_allreduce_op \"sum\": not supported with ZenFlow (as in DeepSpeed); use \"mean\""),
      make_rule(
          "data_types.grad_accum_dtype", "a 16-bit dtype other than the model's",
          R"({"data_types": {"grad_accum_dtype": "bf16"}})",
          [accum16, model](const Config& c) { return accum16(c) && *c.data_types.grad_accum_dtype != model(c); },
          [accum_key, model](const Config& c) {
            return str_cat(accum_key(c), ": gradients accumulate in fp32 or in the model's own dtype (",
                           to_string(model(c)), ")");
          }),
      make_rule(
          "data_types.grad_accum_dtype", "16-bit with ZenFlow",
          R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}, "zero_optimization": {)" +
              cpu_zenflow + "}}",
          [accum16](const Config& c) { return accum16(c) && c.zero.zenflow.has_value(); },
          [accum_key](const Config& c) {
            return accum_key(c) + ": ZenFlow selects and steps on fp32 gradients; not supported with it";
          }),
  };
}

}  // namespace

std::string whole_tensor_message(const std::string& type, const char* clash) {
  return str_cat("optimizer.type: ",
                 type == "lamb" ? "Lamb's per-tensor trust ratio" : "Muon's Newton-Schulz step on whole matrices",
                 " is not supported with ", clash ? clash : "", " yet; use Adam/AdamW there");
}

std::vector<Rule> precision_and_optimizer_rules() {
  std::vector<Rule> rules = master_rules(/*bf16=*/true);
  const Rule both{
      "bf16.bf16_master_weights_and_grads", "with `fp16.fp16_master_weights_and_grads`",
      R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}, )"
      R"("fp16": {"fp16_master_weights_and_grads": true}, "zero_optimization": {"stage": 1}})",
      [](const Config& c) { return c.bf16.bf16_master_weights_and_grads && c.fp16.fp16_master_weights_and_grads; },
      [](const Config&) {
        return std::string(
            "bf16.bf16_master_weights_and_grads and fp16.fp16_master_weights_and_grads: "
            "choose one (they name the model's dtype)");
      }};
  rules.insert(rules.begin(), both);
  for (auto part : {std::vector<Rule>(master_rules(false)), grad_norm_rules(), optimizer_rules(), reduction_rules()})
    for (Rule& r : part) rules.push_back(std::move(r));
  return rules;
}

}  // namespace deepspeed::config
