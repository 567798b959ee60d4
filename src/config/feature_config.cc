// aio, activation_checkpointing, pipeline, checkpoint, comms_logger, monitors and flops_profiler:
// parse, validate and dump. Defaults from DeepSpeed's aio_config, activation_checkpointing/config,
// runtime/config.py (pipeline, checkpoint), comm/config, monitor/config and profiling/config.
#include <regex>

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

using TpConfig = TensorParallelConfig;

// A tp_size beside autotp_size: 1 (unset) or the same number.
void check_tp_size(int64_t size, const TpConfig& c, const std::string& path) {
  if (size != 1 && size != c.autotp_size)
    fail_at(path, "must equal tensor_parallel.autotp_size (" + std::to_string(c.autotp_size) + "), got " +
                      std::to_string(size));
}

const Section<TpLayerSpecConfig>& layer_spec_section() {
  using C = TpLayerSpecConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          string_list_key<C>("patterns", &C::patterns, "regexes searched in parameter names (<module>.weight)"),
          choice_key<C>("partition_type", &C::partition_type, {"column", "row", "skip", "vocab"},
                        "how the matching weights split (vocab, ours: an embedding's rows)", /*case_insensitive=*/true),
          custom_key<C>(
              "shape", "[k, -1] or null", "k equal blocks fused along the output, each split over the group",
              [](ObjectReader& r, const std::string& key, C& s) {
                const Json* shape = r.find(key);
                if (!shape || shape->is_null()) return;
                if (!shape->is_array() || shape->size() != 2 || !(*shape)[0].is_number_integer() || (*shape)[1] != -1 ||
                    (*shape)[0].get<int64_t>() < 1)
                  fail_at(r.path_of(key),
                          "only [k, -1] (k equal blocks fused along the output) is supported, got " + describe(*shape));
                s.fused_parts = (*shape)[0].get<int64_t>();
                if (s.partition_type != "column")
                  fail_at(r.path_of(key), "fused blocks need partition_type \"column\"");
              },
              [](const C& s) -> std::optional<OrderedJson> {
                if (s.fused_parts <= 1) return std::nullopt;
                return OrderedJson::array({s.fused_parts, -1});
              }),
          bool_key<C>("gather_output", &C::gather_output, "gather a column-parallel output whole"),
          custom_key<C>(
              "partition_dim", "0 or 1 or null", "checked against partition_type (column splits 0, row 1)",
              [](ObjectReader& r, const std::string& key, C& s) {
                const Json* dim = r.find(key);
                if (!dim || dim->is_null()) return;
                const int64_t d = ObjectReader::to_int(*dim, r.path_of(key), 0, 1);
                if ((s.partition_type == "column" && d != 0) || (s.partition_type == "row" && d != 1))
                  fail_at(r.path_of(key), "a " + s.partition_type + "-parallel weight splits dimension " +
                                              (s.partition_type == "column" ? "0" : "1") + ", got " +
                                              std::to_string(d));
              },
              [](const C&) { return std::optional<OrderedJson>(); }),
          refused_key<C>("grad_allreduce", false, "replicated layers' gradients are equal on every tensor rank here"),
          refused_key<C>("model_types", nullptr, "there are no model types to filter by in C++"),
      },
      [](ObjectReader& r, C& s) {
        if (s.patterns.empty()) fail_at(r.path_of("patterns"), "must list at least one pattern");
        // Compiled as tp::auto_tp compiles them (ECMAScript), so a bad one is refused when the config is read.
        for (const std::string& pattern : s.patterns) {
          try {
            std::regex(pattern, std::regex::ECMAScript);
          } catch (const std::regex_error& e) {
            fail_at(r.path_of("patterns"), "'" + pattern + "' is not a regular expression: " + e.what());
          }
        }
      });
  return kSection;
}

// tensor_parallel.tensor_parallel (alias tp): DeepSpeed's inference-style group settings.
struct TpGroup {
  int tp_size = 1;
};

const Section<TpGroup>& tp_group_section() {
  static const Section<TpGroup> kSection(
      SectionKind::kPydantic,
      {
          int_key<TpGroup, int>("tp_size", &TpGroup::tp_size, 1, "1 or autotp_size"),
          refused_key<TpGroup>("tp_grain_size", 1, "splits are even"),
          refused_key<TpGroup>("mpu", nullptr, "a Python object"),
          refused_key<TpGroup>("tp_group", nullptr, "a Python object; the engine forms the groups"),
      });
  return kSection;
}

// partition_config: its keys live in TensorParallelConfig itself.
const Section<TpConfig>& partition_config_section() {
  using C = TpConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          bool_key<C>("use_default_specs", &C::use_default_specs, "the built-in layer names after the given specs"),
          bool_key<C>("strict_mode", &C::strict_mode,
                      "a Linear or Embedding no spec names is an error (false: it stays whole)"),
          string_list_key<C>("lm_head_patterns", &C::lm_head_patterns, "layer names of the LM head"),
          refused_key<C>("embedding_partition_dim", 0, "embeddings split by vocabulary (dimension 0)"),
          custom_key<C>(
              "tp_size", "integer >= 1", "1 or autotp_size",
              [](ObjectReader& r, const std::string& key, C& c) {
                const Json* n = r.find(key);
                if (n && !n->is_null())
                  check_tp_size(ObjectReader::to_int(*n, r.path_of(key), 1, 1 << 20), c, r.path_of(key));
              },
              [](const C&) { return std::optional<OrderedJson>(); }),
          with_keys_of(custom_key<C>(
                           "layer_specs", "list of sections", "which weights split how (DeepSpeed's TPLayerSpec)",
                           [](ObjectReader& r, const std::string& key, C& c) {
                             const Json* specs = r.find(key);
                             if (!specs || specs->is_null()) return;
                             if (!specs->is_array())
                               fail_at(r.path_of(key), "expected a list, got " + describe(*specs));
                             for (size_t i = 0; i < specs->size(); ++i)
                               c.layer_specs.push_back(layer_spec_section().parse(
                                   (*specs)[i], r.path_of(key) + "[" + std::to_string(i) + "]", nullptr));
                           },
                           [](const C& c) {
                             OrderedJson specs = OrderedJson::array();
                             for (const TpLayerSpecConfig& s : c.layer_specs)
                               specs.push_back(layer_spec_section().dump(s));
                             return std::optional<OrderedJson>(specs);
                           }),
                       layer_spec_section(), "[]"),
      });
  return kSection;
}

}  // namespace

const Section<TensorParallelConfig>& tensor_parallel_section() {
  using C = TpConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          int_key<C, int>("autotp_size", &C::autotp_size, 0, "tensor-parallel ranks (0 or 1: off)"),
          bool_key<C>("tp_overlap_comm", &C::tp_overlap_comm,
                      "column-parallel backward overlaps the input gradient's all-reduce"),
          custom_key<C>(
              "dtype", "one of fp32, fp16, bf16 (also float32, torch.bfloat16, ...)",
              "must agree with the fp16 / bf16 sections",
              [](ObjectReader& r, const std::string& key, C& c) {
                std::string dtype;
                if (r.read_choice(key, &dtype,
                                  {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16", "torch.float32",
                                   "torch.float16", "torch.bfloat16"}))
                  c.dtype = dtype.find("bf") != std::string::npos   ? "bf16"
                            : dtype.find("16") != std::string::npos ? "fp16"
                                                                    : "fp32";
              },
              [](const C& c) -> std::optional<OrderedJson> {
                if (!c.dtype) return std::nullopt;
                return OrderedJson(*c.dtype);
              }),
          custom_key<C>(
              "vocab_parallel_lm_head", "bool or null", "false: the LM head stays whole; unset or true: vocab-parallel",
              [](ObjectReader& r, const std::string& key, C& c) {
                const Json* v = r.find(key);
                if (!v || v->is_null()) return;
                if (!v->is_boolean()) fail_at(r.path_of(key), "expected true, false or null, got " + describe(*v));
                c.vocab_parallel_lm_head = v->get<bool>();
              },
              [](const C& c) { return std::optional<OrderedJson>(optional_json(c.vocab_parallel_lm_head)); }),
          refused_key<C>("vocab_parallel_ce_backend", "torch",
                         "only the PyTorch-style vocabulary-parallel cross-entropy"),
          refused_key<C>("preset_model", nullptr, "name the layers in partition_config.layer_specs instead"),
          refused_key<C>("injection_policy_tuple", nullptr, "name the layers in partition_config.layer_specs instead"),
          refused_key<C>("keep_module_on_host", false, "the model is sliced where it was built"),
          refused_key<C>("replace_with_kernel_inject", false, "no inference kernels").alias("kernel_inject"),
          with_keys_of(custom_key<C>(
                           "tensor_parallel", "section", "the group's size: 1 or autotp_size",
                           [](ObjectReader& r, const std::string& key, C& c) {
                             const Json* v = r.find(key);
                             if (!v || v->is_null()) return;
                             const TpGroup g = tp_group_section().parse(*v, r.path_of(key), nullptr);
                             check_tp_size(g.tp_size, c, join_path(r.path_of(key), "tp_size"));
                           },
                           [](const C&) { return std::optional<OrderedJson>(); })
                           .alias("tp"),
                       tp_group_section()),
          with_keys_of(custom_key<C>(
                           "partition_config", "section", "which layers split how",
                           [](ObjectReader& r, const std::string& key, C& c) {
                             const Json* v = r.find(key);
                             if (v && !v->is_null())
                               partition_config_section().parse_into(*v, r.path_of(key), nullptr, c);
                           },
                           [](const C& c) { return std::optional<OrderedJson>(partition_config_section().dump(c)); }),
                       partition_config_section()),
      });
  return kSection;
}

}  // namespace deepspeed::config
