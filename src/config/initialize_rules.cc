// The rules of initialize_rules.h, in the order each phase checks them.
#include "config/initialize_rules.h"

#include <algorithm>
#include <sstream>

#include "config/feature_gate.h"
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

// The model's own deepspeed::tp and DistributedAttention layers against the config (a caller that lays out the groups
// itself, the pipeline engine, checks its layers against its topology: pipeline_module_rules).
std::vector<InitializeRule> model_rules() {
  Facts split;
  split.layers_split = 2;
  Facts client;
  client.client_optimizer = true;
  Facts attention;
  attention.model_sp = 2;
  return {
      rule(
          Phase::kModel, "tensor_parallel.autotp_size", "other than the degree the model's tp layers are split over",
          "{}", split,
          [](const Config& c, const Facts& f) {
            return !f.caller_groups && f.layers_split > 0 && f.layers_split != tp_of(c);
          },
          [](const Config& c, const Facts& f) {
            return str_cat("tensor_parallel.autotp_size: the model's layers are split over ", f.layers_split,
                           " ranks (deepspeed::tp layers); set autotp_size to ", f.layers_split, ", got ",
                           c.tensor_parallel.autotp_size);
          }),
      rule(
          Phase::kModel, "tensor_parallel.autotp_size", "> 1 (AutoTP) with a client optimizer",
          R"({"tensor_parallel": {"autotp_size": 2}})", client,
          [](const Config& c, const Facts& f) {
            return !f.caller_groups && tp_of(c) > 1 && f.layers_split == 0 && f.client_optimizer;
          },
          [](const Config&, const Facts&) {
            return std::string(
                "tensor_parallel.autotp_size: AutoTP replaces the model's layers, so a client optimizer built over "
                "them would step the old ones; name the optimizer in the config");
          }),
      rule(
          Phase::kModel, "sequence_parallel_size", "other than the degree of the model's DistributedAttention layers",
          "{}", attention,
          [](const Config& c, const Facts& f) { return f.model_sp > 0 && f.model_sp != c.sequence_parallel_size; },
          [](const Config& c, const Facts& f) {
            return str_cat("sequence_parallel_size: the model's DistributedAttention layers split sequences over ",
                           f.model_sp, " ranks; set sequence_parallel_size to ", f.model_sp, ", got ",
                           c.sequence_parallel_size);
          }),
      rule(
          Phase::kModel, "sequence_parallel_size", "> 1 with no DistributedAttention layer in the model",
          R"({"sequence_parallel_size": 2})", Facts{},
          [](const Config& c, const Facts& f) { return c.sequence_parallel_size > 1 && f.model_sp == 0; },
          [](const Config& c, const Facts&) {
            return str_cat("sequence_parallel_size: ", c.sequence_parallel_size,
                           " ranks would split each sequence, but the model has no "
                           "deepspeed::sequence::DistributedAttention layer to exchange them; build its attention "
                           "with one");
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

// ZenFlow's selective update is the config's AdamW over the whole world, and a scheduler needs an optimizer.
std::vector<InitializeRule> step_rules() {
  Facts client;
  client.client_optimizer = true;
  Facts pipeline;
  pipeline.whole_world = false;
  const std::string adam = R"("optimizer": {"type": "AdamW", "params": {"lr": 0.001}})";
  const std::string zenflow = R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
      "zenflow": {"topk_ratio": 0.1}})";
  const std::string z = "zero_optimization.zenflow";
  auto has_zenflow = [](const Config& c) { return c.zero.zenflow.has_value(); };
  return {
      rule(
          Phase::kOptimizer, z, "with a client optimizer or none", "{" + zenflow + "}", Facts{},
          [has_zenflow](const Config& c, const Facts& f) {
            return has_zenflow(c) && (f.client_optimizer || !c.optimizer.has_value());
          },
          [](const Config&, const Facts&) { return zenflow_needs_adam_message(); }),
      rule(
          Phase::kOptimizer, z, "inside a pipeline or a caller's layout", "{" + adam + ", " + zenflow + "}", pipeline,
          [has_zenflow](const Config& c, const Facts& f) { return has_zenflow(c) && !f.whole_world; },
          [z](const Config&, const Facts&) {
            return z + ": not supported inside a pipeline or another data-parallel layout yet";
          }),
      rule(
          Phase::kExperts, z, "with MoE experts", "{" + adam + ", " + zenflow + "}", Facts{},
          [has_zenflow](const Config& c, const Facts&) { return has_zenflow(c); },
          [z](const Config&, const Facts&) {
            return z +
                   ": not supported with MoE expert parallelism (experts reduce over their own groups; the "
                   "selective update would average them over the world)";
          }),
      rule(
          Phase::kOptimizer, "scheduler", "without an optimizer (none in the config, none passed)",
          R"({"scheduler": {"type": "WarmupLR"}})", Facts{},
          [](const Config& c, const Facts& f) {
            return c.scheduler.has_value() && !c.optimizer.has_value() && !f.client_optimizer;
          },
          [](const Config&, const Facts&) {
            return std::string("scheduler: a scheduler needs an optimizer to drive");
          }),
  };
}

Facts pipeline_of(int stages, int model_axis, int layers_split) {
  Facts f;
  f.pipeline_stages = stages;
  f.model_axis = model_axis;
  f.layers_split = layers_split;
  f.whole_world = false;
  return f;
}

// pipe::initialize: the config and the caller against the PipelineModule's topology and layers. (What the config
// alone rules out for a pipeline is config::pipeline_rules.)
std::vector<InitializeRule> pipeline_module_rules() {
  const std::string tp2 = R"({"tensor_parallel": {"autotp_size": 2}})";
  Facts caller = pipeline_of(2, 1, 0);
  caller.caller_groups = true;
  Facts other_group = pipeline_of(2, 2, 2);
  other_group.model_axis_is_tp_group = false;
  return {
      rule(
          Phase::kPipeline, "pipe::initialize", "given data- or model-parallel groups", "{}", caller,
          [](const Config&, const Facts& f) { return f.caller_groups; },
          [](const Config&, const Facts&) {
            return std::string("pipe::initialize: the pipeline engine builds its own data- and model-parallel groups");
          }),
      rule(
          Phase::kPipeline, "pipeline.stages", "differing from the module's topology", R"({"pipeline": {"stages": 4}})",
          pipeline_of(2, 1, 0),
          [](const Config& c, const Facts& f) { return c.pipeline.stages && *c.pipeline.stages != f.pipeline_stages; },
          [](const Config& c, const Facts& f) {
            return str_cat("pipeline.stages ", c.pipeline.stages.value_or(0), " differs from the PipelineModule's ",
                           f.pipeline_stages, " stages");
          }),
      rule(
          Phase::kPipeline, "tensor_parallel.autotp_size", "differing from the topology's \"model\" axis", tp2,
          pipeline_of(2, 1, 0), [](const Config& c, const Facts& f) { return tp_of(c) != f.model_axis; },
          [](const Config& c, const Facts& f) {
            return str_cat("tensor_parallel.autotp_size ", c.tensor_parallel.autotp_size,
                           " differs from the pipeline topology's \"model\" axis of ", f.model_axis,
                           " (set them equal: the stage's layers are split over the model axis)");
          }),
      rule(
          Phase::kPipeline, "tensor_parallel.tp_overlap_comm", "without a \"model\" axis of more than 1 rank",
          R"({"tensor_parallel": {"tp_overlap_comm": true}})", pipeline_of(2, 1, 0),
          [](const Config& c, const Facts& f) { return c.tensor_parallel.tp_overlap_comm && f.model_axis == 1; },
          [](const Config&, const Facts&) {
            return std::string(
                "tensor_parallel.tp_overlap_comm overlaps the tensor-parallel all-reduces: it needs a \"model\" "
                "axis of more than 1 rank");
          }),
      rule(
          Phase::kPipeline, "pipe::initialize", "tensor-parallel layers without a \"model\" axis", "{}",
          pipeline_of(2, 1, 2), [](const Config&, const Facts& f) { return f.model_axis == 1 && f.layers_split > 0; },
          [](const Config&, const Facts& f) {
            return str_cat("pipe::initialize: the stage's layers are split over ", f.layers_split,
                           " tensor-parallel ranks; give the topology a \"model\" axis of that size "
                           "(PipeModelDataParallelTopology)");
          }),
      rule(
          Phase::kPipeline, "pipe::initialize", "a \"model\" axis the layers are not split over", tp2,
          pipeline_of(2, 2, 0),
          [](const Config&, const Facts& f) { return f.model_axis > 1 && f.layers_split != f.model_axis; },
          [](const Config&, const Facts& f) {
            return str_cat("pipe::initialize: the topology's \"model\" axis has ", f.model_axis,
                           " ranks, but the stage's layers are split over ", f.layers_split,
                           " (build them with deepspeed::tp layers over tp::tensor_parallel_groups(", f.model_axis,
                           ").tensor_parallel)");
          }),
      // PipeModelDataParallelTopology puts the model axis last, which is tp::tensor_parallel_groups' layout of
      // consecutive ranks.
      rule(
          Phase::kPipeline, "pipe::initialize", "a \"model\" axis grouping other ranks than the layers' group", tp2,
          other_group, [](const Config&, const Facts& f) { return f.model_axis > 1 && !f.model_axis_is_tp_group; },
          [](const Config&, const Facts&) {
            return std::string(
                "pipe::initialize: the topology's \"model\" axis groups other ranks than the tensor-parallel "
                "layers do; use PipeModelDataParallelTopology (model axis last)");
          }),
  };
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kDegrees:
      return "before any transform";
    case Phase::kModel:
      return "the model's layers";
    case Phase::kLayout:
      return "groups laid out";
    case Phase::kExperts:
      return "MoE experts";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kPipeline:
      return "pipe::initialize";
  }
  return "?";
}

}  // namespace

const std::vector<InitializeRule>& initialize_rules() {
  static const std::vector<InitializeRule> kRules = [] {
    std::vector<InitializeRule> rules = degree_rules();
    for (auto part : {model_rules, layout_rules, client_rules, overlap_rules, step_rules, pipeline_module_rules})
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
