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
  r.finish_ignoring_unknown();
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
  r.finish_ignoring_unknown();
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
  r.finish_ignoring_unknown();
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
    pw.finish_ignoring_unknown();
  }
  r.finish_ignoring_unknown();
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
  r.take_string_booleans();
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
  r.take_string_booleans();
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
  r.take_string_booleans();
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
  r.finish_ignoring_unknown();
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

namespace deepspeed::config {
namespace {

// A key DeepSpeed offers that deepspeed-cpp has no form of: accepted only at the value that means "not used".
void refuse_unless(ObjectReader& r, const std::string& key, const Json& allowed, const std::string& why) {
  const Json* v = r.find(key);
  if (v && !v->is_null() && *v != allowed) fail_at(r.path_of(key), "is not supported by deepspeed-cpp (" + why + ")");
}

TpLayerSpecConfig parse_tp_layer_spec(const Json& node, const std::string& path) {
  ObjectReader r(node, path, nullptr);
  r.take_string_booleans();
  TpLayerSpecConfig s;
  r.read_string_list("patterns", &s.patterns);
  if (s.patterns.empty()) fail_at(r.path_of("patterns"), "must list at least one pattern");
  r.read_choice("partition_type", &s.partition_type, {"column", "row", "skip", "vocab"}, /*case_insensitive=*/true);
  r.read_bool("gather_output", &s.gather_output);
  if (const Json* shape = r.find("shape"); shape && !shape->is_null()) {
    // [k, -1]: k equal blocks fused along the output, each split over the group.
    if (!shape->is_array() || shape->size() != 2 || !(*shape)[0].is_number_integer() || (*shape)[1] != -1 ||
        (*shape)[0].get<int64_t>() < 1)
      fail_at(r.path_of("shape"), "only [k, -1] (k equal blocks fused along the output) is supported, got " +
                                      describe(*shape));
    s.fused_parts = (*shape)[0].get<int64_t>();
    if (s.partition_type != "column") fail_at(r.path_of("shape"), "fused blocks need partition_type \"column\"");
  }
  if (const Json* dim = r.find("partition_dim"); dim && !dim->is_null()) {
    const int64_t d = ObjectReader::to_int(*dim, r.path_of("partition_dim"), 0, 1);
    if ((s.partition_type == "column" && d != 0) || (s.partition_type == "row" && d != 1))
      fail_at(r.path_of("partition_dim"), "a " + s.partition_type + "-parallel weight splits dimension " +
                                              (s.partition_type == "column" ? "0" : "1") + ", got " +
                                              std::to_string(d));
  }
  refuse_unless(r, "grad_allreduce", false, "replicated layers' gradients are equal on every tensor rank here");
  refuse_unless(r, "model_types", nullptr, "there are no model types to filter by in C++");
  r.finish();
  return s;
}

}  // namespace

TensorParallelConfig parse_tensor_parallel_config(const Json& node) {
  ObjectReader r(node, "tensor_parallel", nullptr);
  r.take_string_booleans();
  TensorParallelConfig c;
  r.read_int("autotp_size", &c.autotp_size, 0);
  r.read_bool("tp_overlap_comm", &c.tp_overlap_comm);
  std::string dtype;
  if (r.read_choice("dtype", &dtype, {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16", "torch.float32",
                                      "torch.float16", "torch.bfloat16"}))
    c.dtype = dtype.find("bf") != std::string::npos ? "bf16" : dtype.find("16") != std::string::npos ? "fp16" : "fp32";
  if (const Json* v = r.find("vocab_parallel_lm_head"); v && !v->is_null()) {
    if (!v->is_boolean())
      fail_at(r.path_of("vocab_parallel_lm_head"), "expected true, false or null, got " + describe(*v));
    c.vocab_parallel_lm_head = v->get<bool>();
  }
  refuse_unless(r, "vocab_parallel_ce_backend", "torch", "only the PyTorch-style vocabulary-parallel cross-entropy");
  refuse_unless(r, "preset_model", nullptr, "name the layers in partition_config.layer_specs instead");
  refuse_unless(r, "injection_policy_tuple", nullptr, "name the layers in partition_config.layer_specs instead");
  refuse_unless(r, "keep_module_on_host", false, "the model is sliced where it was built");
  refuse_unless(r, r.pick_alias("replace_with_kernel_inject", "kernel_inject"), false, "no inference kernels");
  const std::string tp_key = r.pick_alias("tensor_parallel", "tp");
  if (const Json* tp = r.find(tp_key); tp && !tp->is_null()) {
    ObjectReader t(*tp, r.path_of(tp_key), nullptr);
    t.take_string_booleans();
    int tp_size = 1;
    t.read_int("tp_size", &tp_size, 1);
    if (tp_size != 1 && tp_size != c.autotp_size)
      fail_at(t.path_of("tp_size"), "must equal tensor_parallel.autotp_size (" + std::to_string(c.autotp_size) +
                                        "), got " + std::to_string(tp_size));
    refuse_unless(t, "tp_grain_size", 1, "splits are even");
    refuse_unless(t, "mpu", nullptr, "a Python object");
    refuse_unless(t, "tp_group", nullptr, "a Python object; the engine forms the groups");
    t.finish();
  }
  if (const Json* pc = r.find("partition_config"); pc && !pc->is_null()) {
    ObjectReader p(*pc, r.path_of("partition_config"), nullptr);
    p.take_string_booleans();
    p.read_bool("use_default_specs", &c.use_default_specs);
    p.read_bool("strict_mode", &c.strict_mode);
    p.read_string_list("lm_head_patterns", &c.lm_head_patterns);
    refuse_unless(p, "embedding_partition_dim", 0, "embeddings split by vocabulary (dimension 0)");
    if (const Json* n = p.find("tp_size"); n && !n->is_null()) {
      const int64_t size = ObjectReader::to_int(*n, p.path_of("tp_size"), 1, 1 << 20);
      if (size != 1 && size != c.autotp_size)
        fail_at(p.path_of("tp_size"), "must equal tensor_parallel.autotp_size (" + std::to_string(c.autotp_size) +
                                          "), got " + std::to_string(size));
    }
    if (const Json* specs = p.find("layer_specs"); specs && !specs->is_null()) {
      if (!specs->is_array()) fail_at(p.path_of("layer_specs"), "expected a list, got " + describe(*specs));
      for (size_t i = 0; i < specs->size(); ++i)
        c.layer_specs.push_back(
            parse_tp_layer_spec((*specs)[i], p.path_of("layer_specs") + "[" + std::to_string(i) + "]"));
    }
    p.finish();
  }
  r.finish();
  return c;
}

OrderedJson dump_tensor_parallel_config(const TensorParallelConfig& c) {
  OrderedJson j;
  j["autotp_size"] = c.autotp_size;
  j["tp_overlap_comm"] = c.tp_overlap_comm;
  if (c.dtype) j["dtype"] = *c.dtype;
  j["vocab_parallel_lm_head"] =
      c.vocab_parallel_lm_head ? OrderedJson(*c.vocab_parallel_lm_head) : OrderedJson(nullptr);
  OrderedJson pc;
  pc["use_default_specs"] = c.use_default_specs;
  pc["strict_mode"] = c.strict_mode;
  pc["lm_head_patterns"] = c.lm_head_patterns;
  OrderedJson specs = OrderedJson::array();
  for (const TpLayerSpecConfig& s : c.layer_specs) {
    OrderedJson e;
    e["patterns"] = s.patterns;
    e["partition_type"] = s.partition_type;
    if (s.fused_parts > 1) e["shape"] = OrderedJson::array({s.fused_parts, -1});
    e["gather_output"] = s.gather_output;
    specs.push_back(e);
  }
  pc["layer_specs"] = specs;
  j["partition_config"] = pc;
  return j;
}

}  // namespace deepspeed::config
