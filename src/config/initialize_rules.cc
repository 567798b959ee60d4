// The rules of initialize_rules.h, in the order each phase checks them.
#include "config/initialize_rules.h"

#include <algorithm>
#include <sstream>

#include "config/rule_table.h"
#include "deepspeed/error.h"

namespace deepspeed::config {
namespace {

using ::deepspeed::detail::str_cat;
using Facts = InitializeFacts;
using Phase = InitializePhase;

int tp_of(const Config& c) { return std::max(c.tensor_parallel.autotp_size, 1); }

InitializeRule rule(Phase phase, std::string key, std::string when, std::string example, Facts facts,
                    std::function<bool(const Config&, const Facts&)> refused,
                    std::function<std::string(const Config&, const Facts&)> message) {
  return InitializeRule{phase,
                        std::move(key),
                        std::move(when),
                        std::move(example),
                        std::move(facts),
                        std::move(refused),
                        std::move(message)};
}

Facts with_caller_groups() {
  Facts f;
  f.caller_groups = true;
  f.caller_splits_data = true;
  f.world = 2;
  f.local_world = 2;
  return f;
}

Facts world_of(int world, int local_world) {
  Facts f;
  f.world = world;
  f.local_world = local_world;
  return f;
}

// The parallel degrees against the world and the caller's groups (the config's own combinations are
// parallel_rules, run just before these).
std::vector<InitializeRule> degree_rules() {
  const std::string hpz = R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}})";
  return {
      rule(
          Phase::kDegrees, "tensor_parallel.autotp_size", "> 1 with the caller's groups",
          R"({"tensor_parallel": {"autotp_size": 2}})", with_caller_groups(),
          [](const Config& c, const Facts& f) { return tp_of(c) > 1 && f.caller_groups; },
          [](const Config&, const Facts&) {
            return std::string(
                "tensor_parallel.autotp_size: with InitializeOptions::data_parallel_group / "
                "model_parallel_group the caller lays out the ranks; leave the tensor-parallel layout "
                "to it");
          }),
      rule(
          Phase::kDegrees, "sequence_parallel_size", "> 1 with the caller's groups (a pipeline's stages)",
          R"({"sequence_parallel_size": 2})", with_caller_groups(),
          [](const Config& c, const Facts& f) { return c.sequence_parallel_size > 1 && f.caller_groups; },
          [](const Config&, const Facts&) {
            return std::string(
                "sequence_parallel_size: Ulysses does not combine with a caller's data- or "
                "model-parallel groups (a pipeline's stages) yet");
          }),
      rule(
          Phase::kDegrees, "zero_optimization.zero_hpz_partition_size",
          "> 1 with AutoTP or the caller's groups splitting the data-parallel world", hpz, with_caller_groups(),
          [](const Config& c, const Facts& f) {
            return c.zero.zero_hpz_partition_size > 1 && (tp_of(c) > 1 || f.caller_splits_data);
          },
          [](const Config&, const Facts&) {
            return std::string(
                "zero_optimization.zero_hpz_partition_size: secondary partitions need the "
                "data-parallel group to be the whole world (not inside a pipeline or another "
                "data-parallel layout)");
          }),
      // Ranks are numbered host by host (the launcher's RANK = node * ranks per host + local rank), so groups of h
      // consecutive ranks stay on one host when h divides the ranks per host.
      rule(
          Phase::kDegrees, "zero_optimization.zero_hpz_partition_size", "> 1 not dividing the ranks per host", hpz,
          world_of(3, 3),
          [](const Config& c, const Facts& f) {
            const int h = c.zero.zero_hpz_partition_size;
            return h > 1 && f.local_world % h != 0;
          },
          [](const Config& c, const Facts& f) {
            return str_cat("zero_optimization.zero_hpz_partition_size ", c.zero.zero_hpz_partition_size,
                           " must divide the ranks per host (", f.local_world,
                           ", LOCAL_WORLD_SIZE): a secondary partition group would span hosts");
          }),
      rule(
          Phase::kDegrees, "tensor_parallel.autotp_size", "not dividing the world",
          R"({"tensor_parallel": {"autotp_size": 2}})", world_of(3, 3),
          [](const Config& c, const Facts& f) { return f.world % tp_of(c) != 0; },
          [](const Config& c, const Facts& f) {
            return str_cat("tensor_parallel.autotp_size (", tp_of(c), ") must divide the world of ", f.world, " ranks");
          }),
      rule(
          Phase::kDegrees, "sequence_parallel_size", "not dividing the world", R"({"sequence_parallel_size": 2})",
          world_of(3, 3), [](const Config& c, const Facts& f) { return f.world % c.sequence_parallel_size != 0; },
          [](const Config& c, const Facts& f) {
            return str_cat("sequence_parallel_size (", c.sequence_parallel_size, ") must divide the world of ", f.world,
                           " ranks");
          }),
  };
}

// The laid-out groups against the config, and a model with MoE experts.
std::vector<InitializeRule> layout_rules() {
  Facts excluded;
  excluded.norm_excluded = true;
  Facts model_parallel;
  model_parallel.model_parallel = true;
  model_parallel.whole_world = false;
  Facts experts;
  Facts experts_in_pipeline;
  experts_in_pipeline.whole_world = false;
  Facts experts_with_client;
  experts_with_client.client_optimizer = true;
  return {
      rule(
          Phase::kLayout, "initialize", "norm_excluded_params without a model-parallel group", "{}", excluded,
          [](const Config&, const Facts& f) { return f.norm_excluded && !f.model_parallel; },
          [](const Config&, const Facts&) {
            return std::string("initialize: norm_excluded_params needs a model_parallel_group of more than one rank");
          }),
      rule(
          Phase::kLayout, "initialize", "a model-parallel group (no tensor-parallel layers) at stage 2 or 3",
          R"({"zero_optimization": {"stage": 2}})", model_parallel,
          [](const Config& c, const Facts& f) { return f.model_parallel && !f.tensor_parallel && c.zero.stage > 1; },
          [](const Config& c, const Facts&) {
            return str_cat("initialize: a model_parallel_group works with zero_optimization.stage 0 or 1, got ",
                           c.zero.stage);
          }),
      rule(
          Phase::kExperts, "zero_optimization.stage", "3 with MoE experts", R"({"zero_optimization": {"stage": 3}})",
          experts, [](const Config& c, const Facts&) { return c.zero.stage > 2; },
          [](const Config& c, const Facts&) {
            return str_cat("zero_optimization.stage: MoE expert parallelism (ep_size > 1) works with stages 0-2, got ",
                           c.zero.stage);
          }),
      rule(
          Phase::kExperts, "initialize", "MoE experts inside a pipeline or a caller's layout", "{}",
          experts_in_pipeline, [](const Config&, const Facts& f) { return !f.whole_world; },
          [](const Config&, const Facts&) {
            return std::string(
                "initialize: MoE expert parallelism (ep_size > 1) is not supported inside a pipeline "
                "or another data-parallel layout; its groups are formed over the whole world");
          }),
      rule(
          Phase::kExperts, "initialize", "MoE experts with a client optimizer or scheduler", "{}", experts_with_client,
          [](const Config&, const Facts& f) { return f.client_optimizer || f.client_scheduler; },
          [](const Config&, const Facts&) {
            return std::string(
                "initialize: a client optimizer or LR scheduler sees one parameter group where the "
                "engine keeps the MoE experts (ep_size > 1) in groups of their own; name the "
                "optimizer and scheduler in the config");
          }),
      rule(
          Phase::kExperts, "zero_optimization.offload_optimizer.device", "nvme with MoE experts",
          R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}})",
          experts,
          [](const Config& c, const Facts&) { return c.zero.offload_optimizer.device == OffloadDevice::kNvme; },
          [](const Config&, const Facts&) {
            return std::string(
                "zero_optimization.offload_optimizer.device: nvme is not supported with MoE expert "
                "parallelism (ep_size > 1); use \"cpu\" or none");
          }),
  };
}

// The optimizer and scheduler the program passes.
std::vector<InitializeRule> client_rules() {
  Facts client;
  client.client_optimizer = true;
  Facts client_scheduler;
  client_scheduler.client_scheduler = true;
  const std::string adam = R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001}})";
  return {
      rule(
          Phase::kOptimizer, "optimizer", "in the config and passed to initialize", "{" + adam + "}", client,
          [](const Config& c, const Facts& f) { return f.client_optimizer && c.optimizer.has_value(); },
          [](const Config&, const Facts&) {
            return std::string(
                "optimizer: the config names an optimizer and initialize() was given one too; "
                "remove one");
          }),
      rule(
          Phase::kOptimizer, "scheduler", "in the config and passed to initialize",
          R"({"scheduler": {"type": "WarmupLR"}})", client_scheduler,
          [](const Config& c, const Facts& f) { return f.client_scheduler && c.scheduler.has_value(); },
          [](const Config&, const Facts&) {
            return std::string(
                "scheduler: the config names a scheduler and initialize() was given one too; remove "
                "one");
          }),
      rule(
          Phase::kOptimizer, "optimizer", "a client optimizer beside ZeRO or 16-bit training",
          R"({"zero_optimization": {"stage": 1}})", client,
          [](const Config& c, const Facts& f) {
            return f.client_optimizer && (c.zero.stage != 0 || c.bf16.enabled || c.fp16.enabled);
          },
          [](const Config&, const Facts&) {
            return std::string(
                "optimizer: a client torch::optim optimizer steps the model's own parameters, so it "
                "works only with zero_optimization.stage 0 in fp32; name the optimizer in the config "
                "instead");
          }),
  };
}

// The steps that need the config's own optimizer on the whole world: overlap_step (ZenFlow's too) and SuperOffload.
std::vector<InitializeRule> overlap_rules() {
  Facts pipeline;
  pipeline.whole_world = false;
  const std::string adam = R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001}})";
  const std::string overlap = R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu",
      "overlap_step": true}})";
  const std::string super_offload = R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu",
      "super_offload": true}})";
  const std::string k = "zero_optimization.offload_optimizer.";
  auto overlaps = [](const Config& c) {
    return c.zero.offload_optimizer.overlap_step || (c.zero.zenflow && c.zero.zenflow->overlap_step);
  };
  auto overlap_key = [k](const Config& c) {
    return c.zero.offload_optimizer.overlap_step ? k + "overlap_step"
                                                 : std::string("zero_optimization.zenflow.overlap_step");
  };
  return {
      rule(
          Phase::kOptimizer, k + "overlap_step", "with a client optimizer or none (also ZenFlow's)",
          "{" + overlap + "}", Facts{},
          [overlaps](const Config& c, const Facts& f) {
            return overlaps(c) && (f.client_optimizer || !c.optimizer.has_value());
          },
          [overlap_key](const Config& c, const Facts&) {
            return overlap_key(c) +
                   ": overlaps the config's optimizer (its CPU kernel); a client optimizer or none "
                   "cannot be overlapped";
          }),
      rule(
          Phase::kOptimizer, k + "overlap_step", "inside a pipeline or a caller's layout (also ZenFlow's)",
          "{" + adam + ", " + overlap + "}", pipeline,
          [overlaps](const Config& c, const Facts& f) { return overlaps(c) && !f.whole_world; },
          [overlap_key](const Config& c, const Facts&) {
            return overlap_key(c) + ": not supported inside a pipeline or another data-parallel layout yet";
          }),
      rule(
          Phase::kOptimizer, k + "super_offload", "with a client optimizer or none", "{" + super_offload + "}", Facts{},
          [](const Config& c, const Facts& f) {
            return c.zero.offload_optimizer.super_offload && (f.client_optimizer || !c.optimizer.has_value());
          },
          [k](const Config&, const Facts&) {
            return k +
                   "super_offload: speculates with the config's optimizer (its CPU kernel); a client optimizer "
                   "or none cannot be rolled back";
          }),
      rule(
          Phase::kOptimizer, k + "super_offload", "inside a pipeline or a caller's layout",
          "{" + adam + ", " + super_offload + "}", pipeline,
          [](const Config& c, const Facts& f) { return c.zero.offload_optimizer.super_offload && !f.whole_world; },
          [k](const Config&, const Facts&) {
            return k + "super_offload: not supported inside a pipeline or another data-parallel layout yet";
          }),
  };
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kDegrees:
      return "before any transform";
    case Phase::kLayout:
      return "groups laid out";
    case Phase::kExperts:
      return "MoE experts";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

}  // namespace

const std::vector<InitializeRule>& initialize_rules() {
  static const std::vector<InitializeRule> kRules = [] {
    std::vector<InitializeRule> rules = degree_rules();
    for (auto part : {layout_rules, client_rules, overlap_rules})
      for (InitializeRule& r : part()) rules.push_back(std::move(r));
    return rules;
  }();
  return kRules;
}

void apply_initialize_rules(InitializePhase phase, const Config& config, const InitializeFacts& facts) {
  for (const InitializeRule& r : initialize_rules())
    if (r.phase == phase && r.refused(config, facts)) throw ConfigError(r.message(config, facts));
}

std::string initialize_rules_markdown() {
  std::ostringstream os;
  os << "| phase | key | refused when | message |\n| --- | --- | --- | --- |\n";
  for (const InitializeRule& r : initialize_rules()) {
    const std::string shown = shortened_message(r.key, r.message(Config::from_string(r.example), r.facts));
    os << "| " << phase_name(r.phase) << " | `" << r.key << "` | " << r.when << " | `" << shown << "` |\n";
  }
  return os.str();
}

}  // namespace deepspeed::config
