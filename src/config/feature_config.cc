// aio, activation_checkpointing, pipeline, checkpoint, comms_logger, monitors and flops_profiler:
// parse, validate and dump. Defaults from DeepSpeed's aio_config, activation_checkpointing/config,
// runtime/config.py (pipeline, checkpoint), comm/config, monitor/config and profiling/config.
#include "config/sections.h"

namespace deepspeed::config {

AioConfig parse_aio_config(const Json& node) {
  ObjectReader r(node, "aio", nullptr);
  AioConfig c;
  r.read_int("block_size", &c.block_size, 1);
  r.read_int("queue_depth", &c.queue_depth, 1);
  r.read_int(r.pick_alias("thread_count", "intra_op_parallelism"), &c.thread_count, 1);
  r.read_bool("single_submit", &c.single_submit);
  r.read_bool("overlap_events", &c.overlap_events);
  r.read_bool("use_gds", &c.use_gds);
  r.finish();
  return c;
}

OrderedJson dump_aio_config(const AioConfig& c) {
  OrderedJson j;
  j["block_size"] = c.block_size;
  j["queue_depth"] = c.queue_depth;
  j["thread_count"] = c.thread_count;
  j["single_submit"] = c.single_submit;
  j["overlap_events"] = c.overlap_events;
  j["use_gds"] = c.use_gds;
  return j;
}

ActivationCheckpointingConfig parse_activation_checkpointing_config(const Json& node) {
  ObjectReader r(node, "activation_checkpointing", nullptr);
  ActivationCheckpointingConfig c;
  r.read_bool("partition_activations", &c.partition_activations);
  r.read_bool("contiguous_memory_optimization", &c.contiguous_memory_optimization);
  r.read_bool("cpu_checkpointing", &c.cpu_checkpointing);
  r.read_optional_int("number_checkpoints", &c.number_checkpoints, 1,
                      std::numeric_limits<int>::max());
  r.read_bool("synchronize_checkpoint_boundary", &c.synchronize_checkpoint_boundary);
  r.read_bool("profile", &c.profile);
  r.finish();
  return c;
}

OrderedJson dump_activation_checkpointing_config(const ActivationCheckpointingConfig& c) {
  OrderedJson j;
  j["partition_activations"] = c.partition_activations;
  j["contiguous_memory_optimization"] = c.contiguous_memory_optimization;
  j["cpu_checkpointing"] = c.cpu_checkpointing;
  j["number_checkpoints"] = optional_json(c.number_checkpoints);
  j["synchronize_checkpoint_boundary"] = c.synchronize_checkpoint_boundary;
  j["profile"] = c.profile;
  return j;
}

PipelineConfig parse_pipeline_config(const Json& node) {
  ObjectReader r(node, "pipeline", nullptr);
  PipelineConfig c;
  // `stages` is a count or DeepSpeed's own "auto" (take it from the PipelineModule).
  const Json* stages = r.find("stages");
  if (stages && !(stages->is_string() && stages->get<std::string>() == "auto")) {
    c.stages = static_cast<int>(
        ObjectReader::to_int(*stages, r.path_of("stages"), 1, std::numeric_limits<int>::max()));
  }
  r.read_string("partition", &c.partition);
  r.read_bool("seed_layers", &c.seed_layers);
  r.read_int("activation_checkpoint_interval", &c.activation_checkpoint_interval, 0);
  r.read_bool("pipe_partitioned", &c.pipe_partitioned);
  r.read_bool("grad_partitioned", &c.grad_partitioned);
  r.finish();
  return c;
}

OrderedJson dump_pipeline_config(const PipelineConfig& c) {
  OrderedJson j;
  j["stages"] = c.stages ? OrderedJson(*c.stages) : OrderedJson("auto");
  j["partition"] = c.partition;
  j["seed_layers"] = c.seed_layers;
  j["activation_checkpoint_interval"] = c.activation_checkpoint_interval;
  j["pipe_partitioned"] = c.pipe_partitioned;
  j["grad_partitioned"] = c.grad_partitioned;
  return j;
}

const char* to_string(TagValidation mode) {
  switch (mode) {
    case TagValidation::kIgnore:
      return "Ignore";
    case TagValidation::kWarn:
      return "Warn";
    case TagValidation::kFail:
      return "Fail";
  }
  return "Warn";
}

CheckpointConfig parse_checkpoint_config(const Json& node) {
  ObjectReader r(node, "checkpoint", nullptr);
  CheckpointConfig c;
  std::string mode = to_string(c.tag_validation);
  // DeepSpeed upper-cases the value before checking it.
  r.read_choice("tag_validation", &mode, {"Ignore", "Warn", "Fail"}, /*case_insensitive=*/true);
  c.tag_validation = mode == "Ignore" ? TagValidation::kIgnore
                     : mode == "Fail" ? TagValidation::kFail
                                      : TagValidation::kWarn;
  r.read_bool("load_universal", &c.load_universal);
  r.read_bool("use_node_local_storage", &c.use_node_local_storage);
  std::string layout = c.save_python_layout ? "python_deepspeed" : "deepspeed_cpp";
  r.read_choice("save_layout", &layout, {"deepspeed_cpp", "python_deepspeed"});
  c.save_python_layout = layout == "python_deepspeed";
  const Json* parallel_write = r.find("parallel_write");
  if (parallel_write && !parallel_write->is_null()) {
    ObjectReader pw(*parallel_write, r.path_of("parallel_write"), nullptr);
    pw.read_bool("pipeline_stage", &c.parallel_write_pipeline_stage);
    pw.finish();
  }
  r.finish();
  return c;
}

OrderedJson dump_checkpoint_config(const CheckpointConfig& c) {
  OrderedJson j;
  j["tag_validation"] = to_string(c.tag_validation);
  j["load_universal"] = c.load_universal;
  j["use_node_local_storage"] = c.use_node_local_storage;
  j["save_layout"] = c.save_python_layout ? "python_deepspeed" : "deepspeed_cpp";
  j["parallel_write"] = OrderedJson{{"pipeline_stage", c.parallel_write_pipeline_stage}};
  return j;
}

CommsLoggerConfig parse_comms_logger_config(const Json& node) {
  ObjectReader r(node, "comms_logger", nullptr);
  CommsLoggerConfig c;
  r.read_bool("enabled", &c.enabled);
  r.read_bool("verbose", &c.verbose);
  r.read_bool("prof_all", &c.prof_all);
  r.read_bool("debug", &c.debug);
  r.read_string_list("prof_ops", &c.prof_ops);
  r.finish();
  return c;
}

OrderedJson dump_comms_logger_config(const CommsLoggerConfig& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["verbose"] = c.verbose;
  j["prof_all"] = c.prof_all;
  j["debug"] = c.debug;
  j["prof_ops"] = c.prof_ops;
  return j;
}

FileMonitorConfig parse_file_monitor_config(const Json& node, const std::string& key) {
  ObjectReader r(node, key, nullptr);
  FileMonitorConfig c;
  r.read_bool("enabled", &c.enabled);
  r.read_string("output_path", &c.output_path);
  r.read_string("job_name", &c.job_name);
  r.finish();
  return c;
}

OrderedJson dump_file_monitor_config(const FileMonitorConfig& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["output_path"] = c.output_path;
  j["job_name"] = c.job_name;
  return j;
}

WandbConfig parse_wandb_config(const Json& node) {
  ObjectReader r(node, "wandb", nullptr);
  WandbConfig c;
  r.read_bool("enabled", &c.enabled);
  r.read_optional_string("group", &c.group);
  r.read_optional_string("team", &c.team);
  r.read_string("project", &c.project);
  r.finish();
  return c;
}

OrderedJson dump_wandb_config(const WandbConfig& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["group"] = optional_json(c.group);
  j["team"] = optional_json(c.team);
  j["project"] = c.project;
  return j;
}

FlopsProfilerConfig parse_flops_profiler_config(const Json& node) {
  ObjectReader r(node, "flops_profiler", nullptr);
  FlopsProfilerConfig c;
  r.read_bool("enabled", &c.enabled);
  r.read_number("recompute_fwd_factor", &c.recompute_fwd_factor, 0.0);
  r.read_int("profile_step", &c.profile_step, 1);
  r.read_int("module_depth", &c.module_depth, -1);
  r.read_int("top_modules", &c.top_modules, 1);
  r.read_bool("detailed", &c.detailed);
  r.read_optional_string("output_file", &c.output_file);
  r.finish();
  return c;
}

OrderedJson dump_flops_profiler_config(const FlopsProfilerConfig& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["recompute_fwd_factor"] = c.recompute_fwd_factor;
  j["profile_step"] = c.profile_step;
  j["module_depth"] = c.module_depth;
  j["top_modules"] = c.top_modules;
  j["detailed"] = c.detailed;
  j["output_file"] = optional_json(c.output_file);
  return j;
}

}  // namespace deepspeed::config
