// aio, activation_checkpointing, pipeline, checkpoint, comms_logger, monitors and flops_profiler:
// parse, validate and dump. Defaults from DeepSpeed's aio_config, activation_checkpointing/config,
// runtime/config.py (pipeline, checkpoint), comm/config, monitor/config and profiling/config.
#include "config/sections.h"

namespace deepspeed::config {

const Section<AioConfig>& aio_section() {
  using C = AioConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          int_key<C, int64_t>("block_size", &C::block_size, 1, "bytes per NVMe read or write request"),
          int_key<C, int>("queue_depth", &C::queue_depth, 1, "requests in flight per NVMe file"),
          int_key<C, int>("thread_count", &C::thread_count, 1, "I/O threads of the NVMe swapper")
              .alias("intra_op_parallelism"),
          bool_key<C>("single_submit", &C::single_submit, "submit NVMe requests one at a time"),
          bool_key<C>("overlap_events", &C::overlap_events, "overlap submitting and completing NVMe requests"),
          bool_key<C>("use_gds", &C::use_gds, "GPUDirect Storage: refused when true (not in this build)"),
      });
  return kSection;
}

const Section<ActivationCheckpointingConfig>& activation_checkpointing_section() {
  using C = ActivationCheckpointingConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          bool_key<C>("partition_activations", &C::partition_activations,
                      "split saved activations over the tensor-parallel group"),
          bool_key<C>("contiguous_memory_optimization", &C::contiguous_memory_optimization,
                      "copy saved activations into one preallocated buffer"),
          bool_key<C>("cpu_checkpointing", &C::cpu_checkpointing, "keep saved activations in host memory"),
          optional_int_key<C, int>("number_checkpoints", &C::number_checkpoints, 1,
                                   "checkpointed layers per step, for the contiguous buffer's size"),
          bool_key<C>("synchronize_checkpoint_boundary", &C::synchronize_checkpoint_boundary,
                      "synchronise the device at each checkpoint boundary"),
          bool_key<C>("profile", &C::profile, "time forward and recompute of each checkpoint"),
      });
  return kSection;
}

const Section<PipelineConfig>& pipeline_section() {
  using C = PipelineConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          // A count or DeepSpeed's own "auto" (take it from the PipelineModule); not an HF placeholder.
          custom_key<C>(
              "stages", "integer >= 1 or \"auto\"", "pipeline stages (deepspeed::pipe::initialize only)",
              [](ObjectReader& r, const std::string& key, C& c) {
                const Json* v = r.find(key);
                if (v && !(v->is_string() && v->get<std::string>() == "auto"))
                  c.stages =
                      static_cast<int>(ObjectReader::to_int(*v, r.path_of(key), 1, std::numeric_limits<int>::max()));
              },
              [](const C& c) {
                return std::optional<OrderedJson>(c.stages ? OrderedJson(*c.stages) : OrderedJson("auto"));
              }),
          string_key<C>("partition", &C::partition, "how layers are split over stages (pipe::initialize)"),
          bool_key<C>("seed_layers", &C::seed_layers, "seed each layer's initialisation by its index"),
          int_key<C, int>("activation_checkpoint_interval", &C::activation_checkpoint_interval, 0,
                          "checkpoint every N layers of a stage (0: none)"),
          bool_key<C>("pipe_partitioned", &C::pipe_partitioned,
                      "no effect: splits activations over a tensor-parallel axis the pipeline refuses"),
          bool_key<C>("grad_partitioned", &C::grad_partitioned,
                      "no effect: splits gradients over a tensor-parallel axis the pipeline refuses"),
      });
  return kSection;
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

namespace {

struct ParallelWrite {
  bool pipeline_stage = false;
};

const Section<ParallelWrite>& parallel_write_section() {
  static const Section<ParallelWrite> kSection(
      SectionKind::kDict, {bool_key<ParallelWrite>("pipeline_stage", &ParallelWrite::pipeline_stage,
                                                   "spread a stage's layer files over its ranks: refused when true")});
  return kSection;
}

}  // namespace

const Section<CheckpointConfig>& checkpoint_section() {
  using C = CheckpointConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          custom_key<C>(
              "tag_validation", "one of Ignore, Warn, Fail (any case)",
              "every rank must save the same tag; only Fail is implemented",
              [](ObjectReader& r, const std::string& key, C& c) {
                std::string mode = to_string(c.tag_validation);
                // DeepSpeed upper-cases the value before checking it.
                r.read_choice(key, &mode, {"Ignore", "Warn", "Fail"}, /*case_insensitive=*/true);
                c.tag_validation = mode == "Ignore" ? TagValidation::kIgnore
                                   : mode == "Fail" ? TagValidation::kFail
                                                    : TagValidation::kWarn;
              },
              [](const C& c) { return std::optional<OrderedJson>(to_string(c.tag_validation)); }),
          bool_key<C>("load_universal", &C::load_universal, "load a universal checkpoint (ds_to_universal)"),
          bool_key<C>("use_node_local_storage", &C::use_node_local_storage,
                      "each node writes its own copy: refused when true"),
          custom_key<C>(
              "save_layout", choice_type_text({"deepspeed_cpp", "python_deepspeed"}),
              "ours (DeepSpeed ignores it): python_deepspeed writes Python DeepSpeed's own files",
              [](ObjectReader& r, const std::string& key, C& c) {
                std::string layout = c.save_python_layout ? "python_deepspeed" : "deepspeed_cpp";
                r.read_choice(key, &layout, {"deepspeed_cpp", "python_deepspeed"});
                c.save_python_layout = layout == "python_deepspeed";
              },
              [](const C& c) {
                return std::optional<OrderedJson>(
                    OrderedJson(c.save_python_layout ? "python_deepspeed" : "deepspeed_cpp"));
              }),
          with_keys_of(custom_key<C>(
                           "parallel_write", "section", "",
                           [](ObjectReader& r, const std::string& key, C& c) {
                             const Json* v = r.find(key);
                             if (v && !v->is_null())
                               c.parallel_write_pipeline_stage =
                                   parallel_write_section().parse(*v, r.path_of(key), nullptr).pipeline_stage;
                           },
                           [](const C& c) {
                             return std::optional<OrderedJson>(
                                 parallel_write_section().dump(ParallelWrite{c.parallel_write_pipeline_stage}));
                           }),
                       parallel_write_section()),
      });
  return kSection;
}

const Section<CommsLoggerConfig>& comms_logger_section() {
  using C = CommsLoggerConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          bool_key<C>("enabled", &C::enabled, "log each collective's size and time"),
          bool_key<C>("verbose", &C::verbose, "print every collective as it runs"),
          bool_key<C>("prof_all", &C::prof_all, "profile every collective (else only prof_ops)"),
          bool_key<C>("debug", &C::debug, "name the caller of each collective"),
          string_list_key<C>("prof_ops", &C::prof_ops, "the collectives to profile when prof_all is false"),
      });
  return kSection;
}

const Section<FileMonitorConfig>& file_monitor_section() {
  using C = FileMonitorConfig;
  static const Section<C> kSection(SectionKind::kPydantic,
                                   {
                                       bool_key<C>("enabled", &C::enabled, "write the monitor's events"),
                                       string_key<C>("output_path", &C::output_path, "directory of the event files"),
                                       string_key<C>("job_name", &C::job_name, "subdirectory and run name"),
                                   });
  return kSection;
}

const Section<WandbConfig>& wandb_section() {
  using C = WandbConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          bool_key<C>("enabled", &C::enabled, "refused when true: no C++ client (use csv_monitor)"),
          optional_string_key<C>("group", &C::group, "the run's group"),
          optional_string_key<C>("team", &C::team, "the team (entity)"),
          string_key<C>("project", &C::project, "the project"),
      });
  return kSection;
}

const Section<FlopsProfilerConfig>& flops_profiler_section() {
  using C = FlopsProfilerConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          bool_key<C>("enabled", &C::enabled, "profile one step's FLOPs, parameters and time per module"),
          number_key<C>("recompute_fwd_factor", &C::recompute_fwd_factor, 0.0, std::numeric_limits<double>::infinity(),
                        "extra forward passes counted for activation recomputation"),
          int_key<C, int>("profile_step", &C::profile_step, 1, "the step profiled"),
          int_key<C, int>("module_depth", &C::module_depth, -1, "module tree depth printed (-1: all)"),
          int_key<C, int>("top_modules", &C::top_modules, 1, "modules listed per depth"),
          bool_key<C>("detailed", &C::detailed, "print the per-module tree"),
          optional_string_key<C>("output_file", &C::output_file, "file of the report (null: stdout)"),
      });
  return kSection;
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
