// The feature gate's combination rules (feature_gate.h): what a key asks for against the rest of the config, each
// a Rule with an example config it refuses. Order matters: a rule may assume the ones before it passed.
#include <limits>
#include <string>

#include "config/feature_gate.h"
#include "deepspeed/error.h"

namespace deepspeed::config {
namespace {

using ::deepspeed::detail::str_cat;

const char* device(const Config& c) { return to_string(c.zero.offload_optimizer.device); }
bool zenflow(const Config& c) { return c.zero.zenflow.has_value(); }
bool offloaded(const Config& c) { return c.zero.offload_optimizer.enabled(); }

// zero_optimization.offload_optimizer: devices, overlap and SuperOffload.
std::vector<Rule> offload_rules() {
  const std::string k = "zero_optimization.offload_optimizer";
  return {
      make_rule(
          k, "at stage 0", zero_example(R"("stage": 0, "offload_optimizer": {"device": "cpu"})"),
          [](const Config& c) { return offloaded(c) && c.zero.stage == 0; },
          [k](const Config& c) {
            return str_cat(k, ": offloading the optimizer needs zero_optimization.stage 1, 2 or 3, got stage ",
                           c.zero.stage);
          }),
      make_rule(
          k, "`pipeline_read`, `pipeline_write` or `fast_init` with device \"cpu\"",
          zero_example(R"("stage": 2, "offload_optimizer": {"device": "cpu", "pipeline_read": true})"),
          [](const Config& c) {
            const auto& oo = c.zero.offload_optimizer;
            return oo.device == OffloadDevice::kCpu && (oo.pipeline() || oo.fast_init);
          },
          k + ": pipeline_read, pipeline_write and fast_init apply to device \"nvme\" only; remove them for "
              "device \"cpu\""),
      make_rule(
          k + ".overlap_step", "true without device \"cpu\"",
          zero_example(
              R"("stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "overlap_step": true})"),
          [](const Config& c) {
            return c.zero.offload_optimizer.overlap_step && c.zero.offload_optimizer.device != OffloadDevice::kCpu;
          },
          [k](const Config& c) {
            return str_cat(k,
                           ".overlap_step: overlaps the CPU optimizer's step with the next step's forward and "
                           "backward, so it needs offload_optimizer.device \"cpu\", got \"",
                           device(c), "\"");
          }),
      make_rule(
          k + ".super_offload", "true other than at stage 3 with device \"cpu\"",
          zero_example(R"("stage": 2, "offload_optimizer": {"device": "cpu", "super_offload": true})"),
          [](const Config& c) {
            return c.zero.offload_optimizer.super_offload &&
                   !(c.zero.stage == 3 && c.zero.offload_optimizer.device == OffloadDevice::kCpu);
          },
          [k](const Config& c) {
            return str_cat(k,
                           ".super_offload: SuperOffload speculates the CPU optimizer's step of ZeRO stage 3 "
                           "with offload_optimizer.device \"cpu\" (as in DeepSpeed), got stage ",
                           c.zero.stage, " and device \"", device(c), "\"");
          }),
      // DeepSpeed reads it only for SuperOffload's CPU Adam worker; changed anywhere else it would do nothing.
      make_rule(
          k + ".cpuadam_cores_perc", "changed without `super_offload`",
          zero_example(R"("stage": 3, "offload_optimizer": {"device": "cpu", "cpuadam_cores_perc": 0.5})"),
          [](const Config& c) {
            const auto& oo = c.zero.offload_optimizer;
            return !oo.super_offload && oo.cpuadam_cores_perc != OffloadOptimizerConfig{}.cpuadam_cores_perc;
          },
          k + ".cpuadam_cores_perc: the share of the cores for SuperOffload's CPU optimizer worker, so it needs "
              "offload_optimizer.super_offload true (as in DeepSpeed); remove it"),
      make_rule(
          k + ".cpuadam_cores_perc", "0",
          zero_example(
              R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true, "cpuadam_cores_perc": 0})"),
          [](const Config& c) { return c.zero.offload_optimizer.cpuadam_cores_perc <= 0.0; },
          [k](const Config& c) {
            return str_cat(k, ".cpuadam_cores_perc must be in (0, 1] (DeepSpeed's range), got ",
                           c.zero.offload_optimizer.cpuadam_cores_perc);
          }),
      make_rule(
          k, "`super_offload` and `overlap_step` together",
          zero_example(
              R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true, "overlap_step": true})"),
          [](const Config& c) {
            return c.zero.offload_optimizer.super_offload && c.zero.offload_optimizer.overlap_step;
          },
          k + ": super_offload and overlap_step are two ways to hide the CPU step; choose one"),
  };
}

// zero_optimization.zenflow: where its states live.
std::vector<Rule> zenflow_rules() {
  const std::string k = "zero_optimization.zenflow";
  return {
      make_rule(
          k, "without `offload_optimizer` \"cpu\"", zero_example(R"("stage": 2, "zenflow": {})"),
          [](const Config& c) { return zenflow(c) && c.zero.offload_optimizer.device != OffloadDevice::kCpu; },
          [k](const Config& c) {
            return str_cat(k,
                           ": needs offload_optimizer.device \"cpu\" (the unselected columns take the CPU "
                           "optimizer's step), got \"",
                           device(c), "\"");
          }),
      make_rule(
          k, "with `offload_param` \"nvme\" at stage 3",
          zero_example(R"("stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "nvme", )"
                       R"("nvme_path": "/tmp"}, "zenflow": {})"),
          [](const Config& c) {
            return zenflow(c) && c.zero.stage == 3 && c.zero.offload_param.device == OffloadDevice::kNvme;
          },
          k + ": the selected values are written into the partitions in memory at every iteration; with "
              "offload_param \"nvme\" they live in swap files (use offload_param \"cpu\" or none)"),
      make_rule(
          k, "with `super_offload`",
          zero_example(R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true}, "zenflow": {})"),
          [](const Config& c) { return zenflow(c) && c.zero.offload_optimizer.super_offload; },
          k + ": ZenFlow and offload_optimizer.super_offload both reschedule the CPU step; choose one"),
      make_rule(
          k + ".auto_ratio", "changed with a fixed `update_interval`",
          zero_example(R"("stage": 2, "offload_optimizer": {"device": "cpu"}, )"
                       R"("zenflow": {"update_interval": 4, "auto_ratio": 0.5})"),
          [](const Config& c) {
            return zenflow(c) && c.zero.zenflow->update_interval &&
                   c.zero.zenflow->auto_ratio != ZenFlowConfig{}.auto_ratio;
          },
          [k](const Config& c) {
            return str_cat(k,
                           ".auto_ratio: tunes the adaptive window of update_interval \"auto\"; "
                           "update_interval is ",
                           c.zero.zenflow->update_interval.value_or(0), " here");
          }),
  };
}

}  // namespace

std::string zenflow_needs_adam_message() {
  return "zero_optimization.zenflow: needs the config's Adam or AdamW optimizer (its selective update is AdamW's; "
         "the rest takes the CPU Adam step)";
}

namespace {

// ZenFlow's selective AdamW (a config without an optimizer section is refused at initialize, where a client
// optimizer would be), and the window it runs over.
std::vector<Rule> zenflow_optimizer_rules() {
  const std::string k = "zero_optimization.zenflow";
  const std::string cpu = R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {})";
  return {
      make_rule(
          k, "with an optimizer other than Adam/AdamW",
          R"({"optimizer": {"type": "Lion", "params": {"lr": 0.001}}, "zero_optimization": {)" + cpu + "}}",
          [](const Config& c) {
            return zenflow(c) && c.optimizer && c.optimizer->type != "adam" && c.optimizer->type != "adamw";
          },
          zenflow_needs_adam_message()),
      make_rule(
          k, "with `optimizer.params.bias_correction` false",
          R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.001, "bias_correction": false}}, )"
          R"("zero_optimization": {)" +
              cpu + "}}",
          [](const Config& c) {
            return zenflow(c) && c.optimizer && !c.optimizer->params.get_bool("bias_correction", true);
          },
          k + ": the selective AdamW corrects its moments' bias; optimizer.params.bias_correction false is not "
              "supported"),
      make_rule(
          k, "with the OneCycle scheduler",
          R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.0001, "cycle_max_lr": 0.001}}, )"
          R"("zero_optimization": {)" +
              cpu + "}}",
          [](const Config& c) { return zenflow(c) && c.scheduler && c.scheduler->type == "OneCycle"; },
          k + ": OneCycle's momentum cycling is not applied to the selective AdamW; use another schedule"),
      make_rule(
          k, "with `gradient_accumulation_steps` > 1",
          R"({"gradient_accumulation_steps": 2, "zero_optimization": {)" + cpu + "}}",
          [](const Config& c) {
            return zenflow(c) && c.gradient_accumulation_steps && *c.gradient_accumulation_steps != 1;
          },
          [k](const Config& c) {
            return str_cat(k,
                           ": update_interval takes the place of gradient_accumulation_steps (DeepSpeed sets "
                           "one to the other); set gradient_accumulation_steps to 1, got ",
                           c.gradient_accumulation_steps.value_or(1));
          }),
      make_rule(
          k, "`select_interval` (in iterations) below a fixed `update_interval`",
          zero_example(R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"select_strategy": )"
                       R"("step", "select_interval": 2, "update_interval": 4})"),
          [](const Config& c) { return zenflow(c) && !zenflow_schedule_problem(*c.zero.zenflow).empty(); },
          [](const Config& c) { return zenflow_schedule_problem(*c.zero.zenflow); }),
      make_rule(
          k, "with fp16", R"({"fp16": {"enabled": true}, "zero_optimization": {)" + cpu + "}}",
          [](const Config& c) { return zenflow(c) && c.fp16.enabled; },
          k + ": fp16 loss scaling is not supported with ZenFlow; use bf16"),
  };
}

// offload_param and ZeRO++'s keys against the stage. (Stage 1/2 keys are honoured unless a rule names them;
// sub_group_size without nvme steps the same values as one group, and a python_deepspeed checkpoint is cut into the
// same sub-groups, checkpoint/deepspeed_export.cc.)
std::vector<Rule> partitioning_rules() {
  const std::string k = "zero_optimization.";
  auto below_stage3 = [k](const std::string& key, const std::string& text) {
    return make_rule(
        k + key, "true (> 1 for the partition size) below stage 3",
        zero_example(R"("stage": 2, ")" + key + (key == "zero_hpz_partition_size" ? "\": 2" : "\": true")),
        [key](const Config& c) {
          const ZeroConfig& z = c.zero;
          const bool on = key == "zero_hpz_partition_size"  ? z.zero_hpz_partition_size > 1
                          : key == "zero_quantized_weights" ? z.zero_quantized_weights
                                                            : z.zero_quantized_gradients;
          return on && z.stage != 3;
        },
        [k, key, text](const Config& c) { return str_cat(k, key, ": ", text, c.zero.stage); });
  };
  return {
      make_rule(
          k + "offload_param.buffer_count", "0 with device \"nvme\" at stage 3",
          zero_example(R"("stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 0})"),
          [](const Config& c) {
            return c.zero.stage == 3 && c.zero.offload_param.device == OffloadDevice::kNvme &&
                   c.zero.offload_param.buffer_count < 1;
          },
          [k](const Config& c) {
            return str_cat(k,
                           "offload_param.buffer_count: swapped parameters pass through these buffers; need "
                           "at least 1, got ",
                           c.zero.offload_param.buffer_count);
          }),
      // A file's offload_param below stage 3 is ignored with a warning when read (as DeepSpeed ignores it), so only a
      // Config built in code reaches this rule.
      make_rule(
          k + "offload_param", "below stage 3 (a Config built in code: a file's is ignored with a warning)", "",
          [](const Config& c) { return c.zero.offload_param.enabled() && c.zero.stage != 3; },
          [k](const Config& c) {
            return str_cat(k,
                           "offload_param: offloading parameters needs zero_optimization.stage 3 (stages 0-2 "
                           "keep whole parameters on every rank), got stage ",
                           c.zero.stage);
          }),
      below_stage3("zero_hpz_partition_size",
                   "partitions stage 3's parameters a second time within a host (ZeRO++ hpZ), got stage "),
      below_stage3("zero_quantized_weights",
                   "quantizes stage 3's parameter all-gathers (ZeRO++ qwZ); stages 0-2 gather no parameters, got "
                   "stage "),
      below_stage3("zero_quantized_gradients", "quantizes stage 3's gradient reductions (ZeRO++ qgZ), got stage "),
  };
}

}  // namespace

std::vector<Rule> offload_and_zenflow_rules() {
  std::vector<Rule> rules = offload_rules();
  for (auto part : {zenflow_rules, zenflow_optimizer_rules, partitioning_rules})
    for (Rule& r : part()) rules.push_back(std::move(r));
  return rules;
}

}  // namespace deepspeed::config
