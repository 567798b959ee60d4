// zero_optimization: parse, validate and dump (keys and defaults from DeepSpeed's
// runtime/zero/config.py and offload_config.py).
#include <limits>

#include "config/sections.h"

namespace deepspeed::config {

namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

const std::vector<std::string>& offload_devices() {
  static const std::vector<std::string> kDevices = {"none", "cpu", "nvme"};
  return kDevices;
}

OffloadDevice device_from_string(const std::string& s) {
  if (s == "cpu") return OffloadDevice::kCpu;
  if (s == "nvme") return OffloadDevice::kNvme;
  return OffloadDevice::kNone;
}

void check_nvme_path(OffloadDevice device, const std::optional<std::string>& nvme_path,
                     const std::string& path) {
  if (device == OffloadDevice::kNvme && (!nvme_path || nvme_path->empty())) {
    fail_at(join_path(path, "nvme_path"), "required when device is \"nvme\"");
  }
}

template <class C>
Field<C> device_key(OffloadDevice C::*m) {
  return custom_key<C>(
      "device", choice_type_text(offload_devices()), "where the states live: none, host memory or NVMe",
      [m](ObjectReader& r, const std::string& key, C& c) {
        std::string device = to_string(c.*m);
        r.read_choice(key, &device, offload_devices());
        c.*m = device_from_string(device);
      },
      [m](const C& c) { return std::optional<OrderedJson>(to_string(c.*m)); });
}

const Section<OffloadOptimizerConfig>& offload_optimizer_section() {
  using C = OffloadOptimizerConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          device_key<C>(&C::device),
          optional_string_key<C>("nvme_path", &C::nvme_path, "directory of the swap files (device nvme)"),
          int_key<C, int>("buffer_count", &C::buffer_count, 0, "NVMe staging buffers"),
          bool_key<C>("pin_memory", &C::pin_memory, "page-locked host buffers (faster device copies)"),
          bool_key<C>("pipeline_read", &C::pipeline_read, "read the next sub-group while one steps (nvme)"),
          bool_key<C>("pipeline_write", &C::pipeline_write, "write a sub-group back while the next steps (nvme)"),
          bool_key<C>("fast_init", &C::fast_init, "create the swap files without writing zeros (nvme)"),
          number_key<C>("ratio", &C::ratio, 0.0, 1.0, "share of the states offloaded (< 1: stage 3 only)"),
          dumped_when_set(
              bool_key<C>("overlap_step", &C::overlap_step, "step on the host while the next backward runs")),
          bool_key<C>("super_offload", &C::super_offload, "SuperOffload's speculative host step"),
          number_key<C>("cpuadam_cores_perc", &C::cpuadam_cores_perc, 0.0, 1.0,
                        "share of the host cores the host optimizer uses"),
      },
      [](ObjectReader& r, C& c) { check_nvme_path(c.device, c.nvme_path, r.path()); });
  return kSection;
}

const Section<OffloadParamConfig>& offload_param_section() {
  using C = OffloadParamConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          device_key<C>(&C::device),
          optional_string_key<C>("nvme_path", &C::nvme_path, "directory of the swap files (device nvme)"),
          int_key<C, int>("buffer_count", &C::buffer_count, 0, "NVMe staging buffers"),
          int_key<C, int64_t>("buffer_size", &C::buffer_size, 0, "elements per NVMe staging buffer"),
          int_key<C, int64_t>("max_in_cpu", &C::max_in_cpu, 0, "parameter elements kept in host memory (nvme)"),
          bool_key<C>("pin_memory", &C::pin_memory, "page-locked host buffers (faster device copies)"),
      },
      [](ObjectReader& r, C& c) { check_nvme_path(c.device, c.nvme_path, r.path()); });
  return kSection;
}

// ZenFlow's own "auto" (nullopt: DeepSpeed decides at run time; not a placeholder for the Trainer) or a whole
// number >= lo: select_interval and update_interval.
Field<ZenFlowConfig> auto_or_int_key(std::string name, std::optional<int64_t> ZenFlowConfig::*m, int64_t lo,
                                     std::string ours) {
  return custom_key<ZenFlowConfig>(
      std::move(name), int_type_text(lo, kMaxInt64) + " or \"auto\"", std::move(ours),
      [m, lo](ObjectReader& r, const std::string& key, ZenFlowConfig& c) {
        const Json* v = r.find(key);
        if (!v || (v->is_string() && v->get<std::string>() == "auto")) return;
        c.*m = ObjectReader::to_int(*v, r.path_of(key), lo, kMaxInt64);
      },
      [m](const ZenFlowConfig& c) {
        return std::optional<OrderedJson>(c.*m ? OrderedJson(*(c.*m)) : OrderedJson("auto"));
      });
}

const Section<ZenFlowConfig>& zenflow_section() {
  using C = ZenFlowConfig;
  static const Section<C> kSection(
      SectionKind::kPydantic,
      {
          number_key<C>("topk_ratio", &C::topk_ratio, 0.0, 1.0,
                        "share of each weight's columns updated on the device every step"),
          choice_key<C>("select_strategy", &C::select_strategy, {"auto", "step", "epoch"},
                        "when the columns are chosen again"),
          auto_or_int_key("select_interval", &C::select_interval, 0, "steps or epochs between selections"),
          auto_or_int_key("update_interval", &C::update_interval, 1,
                          "steps between host updates of the rest (\"auto\": adaptive)"),
          bool_key<C>("overlap_step", &C::overlap_step, "the host update runs beside the next steps"),
          bool_key<C>("offload", &C::offload, "selective states in host memory: refused when true"),
          number_key<C>("auto_ratio", &C::auto_ratio, 0.0, 1.0, "the adaptive update_interval's threshold"),
          int_key<C, int64_t>("full_warm_up_rounds", &C::full_warm_up_rounds, 0,
                              "steps that update every column on the host before selection starts"),
          custom_key<C>(
              "pt_reserved_cores_perc", "number in 0..1", "core pinning: refused when set",
              [](ObjectReader& r, const std::string& key, C& c) {
                double cores = 0.0;
                if (r.read_number(key, &cores, 0.0, 1.0)) c.pt_reserved_cores_perc = cores;
              },
              [](const C& c) -> std::optional<OrderedJson> {
                if (!c.pt_reserved_cores_perc) return std::nullopt;
                return OrderedJson(*c.pt_reserved_cores_perc);
              }),
          // DeepSpeed fills it from its training dataloader; the engine here has none, so the config gives it.
          custom_key<C>(
              "steps_per_epoch", "integer >= 1", "ours: steps per epoch for select_strategy \"epoch\"/\"auto\"",
              [](ObjectReader& r, const std::string& key, C& c) {
                r.read_optional_int(key, &c.steps_per_epoch, 1, kMaxInt64);
              },
              [](const C& c) -> std::optional<OrderedJson> {
                if (!c.steps_per_epoch) return std::nullopt;
                return OrderedJson(*c.steps_per_epoch);
              }),
      },
      [](ObjectReader& r, C& c) {
        if (c.topk_ratio <= 0.0 || c.topk_ratio >= 1.0)
          fail_at(r.path_of("topk_ratio"), "must lie strictly between 0 and 1, got " + std::to_string(c.topk_ratio));
        // DeepSpeed's own checks (ZenFlowConfig / configure_zenflow), same meaning.
        if (c.select_strategy == "auto" && c.select_interval)
          fail_at(r.path_of("select_interval"),
                  "select_strategy \"auto\" selects once per epoch; remove select_interval "
                  "or set select_strategy to \"step\" or \"epoch\"");
        if (c.select_strategy != "auto" && !c.select_interval)
          fail_at(r.path_of("select_interval"), "select_strategy \"" + c.select_strategy + "\" needs a number");
      });
  return kSection;
}

// "auto" under DeepSpeed's field name (`prefetch_bucket_size`) rather than its documented `stage3_` key: Hugging
// Face's Trainer fills only the documented key, and DeepSpeed then drops the leftover "auto" and keeps its default.
// So do we, with a warning saying so (axolotl's zero3_bf16.json writes them this way).
void keep_default_for_alias_auto(ObjectReader& r, const std::string& key, const std::string& documented,
                                 const std::string& default_text, std::set<std::string>* autos) {
  const Json* v = r.find(key);
  if (key == documented || !v || !v->is_string() || v->get<std::string>() != "auto") return;
  if (autos) autos->erase(r.path_of(key));
  warn(r.path_of(key) + ": \"auto\" under DeepSpeed's field name is not filled by Hugging Face's Trainer (it fills " +
       documented + "); DeepSpeed's default " + default_text + " kept, as in DeepSpeed");
}

// A stage-3 knob that DeepSpeed accepts as `stage3_<name>` (documented, and the name dumped) or `<name>` (its field
// name). "auto" under the field name keeps the default (keep_default_for_alias_auto).
Field<ZeroConfig> stage3_int_key(const std::string& name, int64_t ZeroConfig::*m, std::string ours) {
  const std::string documented = "stage3_" + name;
  Field<ZeroConfig> f = custom_key<ZeroConfig>(
      documented, int_type_text(0, kMaxInt64), std::move(ours),
      [m, documented](ObjectReader& r, const std::string& key, ZeroConfig& z) {
        r.read_int(key, &(z.*m), 0, kMaxInt64, AutoPolicy::kAllowAuto);
        keep_default_for_alias_auto(r, key, documented, std::to_string(z.*m), r.autos());
      },
      [m](const ZeroConfig& z) { return std::optional<OrderedJson>(z.*m); }, /*accepts_auto=*/true);
  f.alias(name);
  return f;
}

Field<ZeroConfig> stage3_bool_key(const std::string& name, bool ZeroConfig::*m, std::string ours,
                                  AutoPolicy policy = AutoPolicy::kNoAuto) {
  const std::string documented = "stage3_" + name;
  Field<ZeroConfig> f = custom_key<ZeroConfig>(
      documented, "bool", std::move(ours),
      [m, documented, policy](ObjectReader& r, const std::string& key, ZeroConfig& z) {
        r.read_bool(key, &(z.*m), policy);
        keep_default_for_alias_auto(r, key, documented, z.*m ? "true" : "false", r.autos());
      },
      [m](const ZeroConfig& z) { return std::optional<OrderedJson>(z.*m); }, policy == AutoPolicy::kAllowAuto);
  f.alias(name);
  return f;
}

// A deprecated spelling DeepSpeed still maps onto its replacement: true sets `replacement`'s device to cpu. Not
// dumped (the replacement is).
template <class O>
Field<ZeroConfig> deprecated_offload_key(const std::string& name, O ZeroConfig::*m, const std::string& replacement) {
  return custom_key<ZeroConfig>(
      name, "bool", "deprecated: true means " + replacement + ".device \"cpu\"",
      [m, replacement](ObjectReader& r, const std::string& key, ZeroConfig& z) {
        bool on = false;
        if (!r.read_bool(key, &on) || !on) return;
        const Json* given = r.find(replacement);
        if (given && !given->is_null())
          fail_at(r.path_of(key), "deprecated alias of " + replacement + "; give only " + replacement);
        (z.*m).device = OffloadDevice::kCpu;
      },
      [](const ZeroConfig&) { return std::optional<OrderedJson>(); });
}

// leaf_module's three lists; DeepSpeed takes a single string for a list of one.
struct LeafModule {
  std::vector<std::string> classes, names, name_suffixes;
};

Field<LeafModule> leaf_list_key(std::string name, std::vector<std::string> LeafModule::*m, std::string ours) {
  Field<LeafModule> f = string_list_key<LeafModule>(std::move(name), m, std::move(ours));
  f.type = "string or list of strings";
  f.read = [m](ObjectReader& r, const std::string& key, LeafModule& l) {
    const Json* v = r.find(key);
    if (v && v->is_string()) {
      l.*m = {v->get<std::string>()};
    } else {
      r.read_string_list(key, &(l.*m));
    }
  };
  return f;
}

const Section<LeafModule>& leaf_module_section() {
  static const Section<LeafModule> kSection(
      SectionKind::kPydantic,
      {
          leaf_list_key("classes", &LeafModule::classes, "no effect: Python class names (no C++ module has one)"),
          leaf_list_key("names", &LeafModule::names, "refused when not empty (mark units with zero::shard)"),
          leaf_list_key("name_suffixes", &LeafModule::name_suffixes,
                        "refused when not empty (mark units with zero::shard)"),
      });
  return kSection;
}

}  // namespace

const char* to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "none";
}

namespace {

// Rules between the section's keys, after all are read.
void check_zero(ObjectReader& r, ZeroConfig& z) {
  if (z.offload_param.enabled() && z.stage < 3) {
    // DeepSpeed reads offload_param only at stage 3 (stages 0-2 keep whole parameters on every rank).
    warn(r.path_of("offload_param") + ": ignored below stage 3, as DeepSpeed ignores it (stage " +
         std::to_string(z.stage) + " keeps whole parameters on every rank)");
    z.offload_param = OffloadParamConfig{};
  }
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3) {
    fail_at(r.path_of("offload_optimizer.ratio"),
            "partial offload (ratio < 1) needs stage 3, got stage " + std::to_string(z.stage));
  }
}

// Partitioning and reduction: the stage, buckets, overlap.
std::vector<Field<ZeroConfig>> partitioning_fields() {
  using C = ZeroConfig;
  return {
      int_key<C, int>("stage", &C::stage, 0, 3, "0: data parallel; 1: optimizer states, 2: +gradients, 3: +parameters"),
      bool_key<C>("contiguous_gradients", &C::contiguous_gradients, "reduce gradients from contiguous buckets"),
      bool_key<C>("reduce_scatter", &C::reduce_scatter, "reduce each bucket to its owners (else all-reduce)"),
      int_key<C, int64_t>("reduce_bucket_size", &C::reduce_bucket_size, 0, kMaxInt64,
                          "gradient elements per reduction; an upper bound, sized down to the model",
                          AutoPolicy::kAllowAuto),
      bool_key<C>("use_multi_rank_bucket_allreduce", &C::use_multi_rank_bucket_allreduce,
                  "all-reduce each bucket across ranks: refused when it would act"),
      bool_key<C>("allgather_partitions", &C::allgather_partitions, "gather updated partitions after the step"),
      int_key<C, int64_t>("allgather_bucket_size", &C::allgather_bucket_size, 0, kMaxInt64,
                          "elements per parameter gather (stages 1-2); an upper bound, sized down to the model",
                          AutoPolicy::kAllowAuto),
      // DeepSpeed's overlap_comm is Optional: unset means "on for stage 3 only".
      custom_key<C>(
          "overlap_comm", "bool", "overlap reductions with backward (default: true at stage 3 only)",
          [](ObjectReader& r, const std::string& key, C& z) {
            z.overlap_comm = z.stage == 3;
            r.read_bool(key, &z.overlap_comm);
          },
          [](const C& z) { return std::optional<OrderedJson>(z.overlap_comm); }),
      bool_key<C>("compute_grad_norm", &C::compute_grad_norm, "compute the global gradient norm each step"),
      bool_key<C>("load_from_fp32_weights", &C::load_from_fp32_weights, "refused when false"),
      bool_key<C>("elastic_checkpoint", &C::elastic_checkpoint,
                  "no effect: every checkpoint here loads at any world size"),
      int_key<C, int64_t>("sub_group_size", &C::sub_group_size, 0,
                          "optimizer elements stepped at a time with nvme offload (0: one group)"),
  };
}

// offload_optimizer and offload_param, with the deprecated spellings DeepSpeed still maps onto them; stage 3's
// gathering and persistence knobs.
std::vector<Field<ZeroConfig>> offload_and_stage3_fields() {
  using C = ZeroConfig;
  return {
      section_key<C>("offload_optimizer", &C::offload_optimizer, offload_optimizer_section(),
                     "optimizer states and step on the host or NVMe"),
      section_key<C>("offload_param", &C::offload_param, offload_param_section(),
                     "stage 3's parameters on the host or NVMe (ignored below stage 3, as in DeepSpeed)"),
      deprecated_offload_key("cpu_offload", &C::offload_optimizer, "offload_optimizer"),
      deprecated_offload_key("cpu_offload_param", &C::offload_param, "offload_param"),
      custom_key<C>(
          "cpu_offload_use_pin_memory", "bool", "deprecated: no effect, as in DeepSpeed",
          [](ObjectReader& r, const std::string& key, C&) {
            bool unused = false;
            r.read_bool(key, &unused);
          },
          [](const C&) { return std::optional<OrderedJson>(); }),
      // Stage 3's gathering and persistence knobs, under their stage3_ names or DeepSpeed's field names.
      stage3_int_key("prefetch_bucket_size", &C::prefetch_bucket_size, "parameter elements gathered ahead"),
      stage3_int_key("param_persistence_threshold", &C::param_persistence_threshold,
                     "parameters this small stay whole on every rank"),
      stage3_int_key("model_persistence_threshold", &C::model_persistence_threshold,
                     "a model-wide persistence budget: refused when set at stage 3"),
      stage3_int_key("max_live_parameters", &C::max_live_parameters,
                     "gathered elements held at once; an upper bound, sized down to the model"),
      stage3_int_key("max_reuse_distance", &C::max_reuse_distance,
                     "keep a gathered unit when it is used again within this many elements"),
      stage3_bool_key("gather_16bit_weights_on_model_save", &C::gather_16bit_weights_on_model_save,
                      "save_16bit_model gathers the whole model", AutoPolicy::kAllowAuto),
      custom_key<C>(
          "stage3_gather_fp16_weights_on_model_save", "bool",
          "deprecated spelling of stage3_gather_16bit_weights_on_model_save",
          [](ObjectReader& r, const std::string& key, C& z) {
            bool gather = false;
            if (r.read_bool(key, &gather) && gather) z.gather_16bit_weights_on_model_save = true;
          },
          [](const C&) { return std::optional<OrderedJson>(); }),
      int_key<C, int64_t>("stage3_module_granularity_threshold", &C::module_granularity_threshold, 0,
                          "automatic unit grouping: refused when > 0 at stage 3")
          .alias("module_granularity_threshold"),
      stage3_bool_key("use_all_reduce_for_fetch_params", &C::use_all_reduce_for_fetch_params,
                      "fetch parameters by all-reduce: refused when true at stage 3"),
      stage3_bool_key("allgather_sequential", &C::allgather_sequential,
                      "gather parameters one by one: refused when true at stage 3"),
  };
}

// ZeRO++, MiCS, leaf modules, ZenFlow and the flags DeepSpeed reads beside them.
std::vector<Field<ZeroConfig>> extension_fields() {
  using C = ZeroConfig;
  return {
      bool_key<C>("ignore_unused_parameters", &C::ignore_unused_parameters,
                  "a parameter with no gradient counts as zero; false is refused"),
      bool_key<C>("legacy_stage1", &C::legacy_stage1, "refused when true"),
      bool_key<C>("round_robin_gradients", &C::round_robin_gradients,
                  "same update as without it; refused with checkpoint.save_layout \"python_deepspeed\""),
      int_key<C, int>("zero_hpz_partition_size", &C::zero_hpz_partition_size, 0,
                      "ZeRO++ secondary partition of stage 3's parameters within a node"),
      bool_key<C>("zero_quantized_weights", &C::zero_quantized_weights, "ZeRO++ int8 parameter gathers (stage 3)"),
      bool_key<C>("zero_quantized_nontrainable_weights", &C::zero_quantized_nontrainable_weights,
                  "refused when true: frozen parameters are never gathered here"),
      bool_key<C>("zero_quantized_gradients", &C::zero_quantized_gradients,
                  "ZeRO++ int4 gradient reductions (stage 3)"),
      removed_in_deepspeed(int_key<C, int>("mics_shard_size", &C::mics_shard_size, std::numeric_limits<int>::min(),
                                           std::numeric_limits<int>::max(), "MiCS: refused when > 0")),
      removed_in_deepspeed(
          bool_key<C>("mics_hierarchical_params_gather", &C::mics_hierarchical_params_gather, "refused when true")),
      bool_key<C>("memory_efficient_linear", &C::memory_efficient_linear, "refused when false at stage 3"),
      bool_key<C>("pipeline_loading_checkpoint", &C::pipeline_loading_checkpoint, "refused when true"),
      bool_key<C>("override_module_apply", &C::override_module_apply, "refused when true at stage 3"),
      bool_key<C>("log_trace_cache_warnings", &C::log_trace_cache_warnings, "no effect: no trace cache here"),
      bool_key<C>("enable_sanity_checks", &C::enable_sanity_checks, "refused when true"),
      bool_key<C>("parameter_alignment", &C::parameter_alignment, "refused when true"),
      bool_key<C>("save_muon_momentum_buffer_in_memory", &C::save_muon_momentum_buffer_in_memory,
                  "no effect: Muon with nvme offload is refused"),
      with_keys_of(custom_key<C>(
                       "leaf_module", "section", "stage-3 units gathered whole",
                       [](ObjectReader& r, const std::string& key, C& z) {
                         const Json* v = r.find(key);
                         if (!v || v->is_null()) return;
                         LeafModule l = leaf_module_section().parse(*v, r.path_of(key), nullptr);
                         z.leaf_module_classes = std::move(l.classes);
                         z.leaf_module_names = std::move(l.names);
                         z.leaf_module_name_suffixes = std::move(l.name_suffixes);
                       },
                       [](const C& z) {
                         return std::optional<OrderedJson>(leaf_module_section().dump(
                             LeafModule{z.leaf_module_classes, z.leaf_module_names, z.leaf_module_name_suffixes}));
                       }),
                   leaf_module_section()),
      with_keys_of(custom_key<C>(
                       "zenflow", "section", "ZenFlow: the important columns step on the device, the rest on the host",
                       [](ObjectReader& r, const std::string& key, C& z) {
                         const Json* v = r.find(key);
                         if (v && !v->is_null()) z.zenflow = zenflow_section().parse(*v, r.path_of(key), nullptr);
                       },
                       [](const C& z) {
                         return std::optional<OrderedJson>(z.zenflow ? zenflow_section().dump(*z.zenflow)
                                                                     : OrderedJson(nullptr));
                       }),
                   zenflow_section()),
  };
}

}  // namespace

const Section<ZeroConfig>& zero_section() {
  static const Section<ZeroConfig> kSection(
      SectionKind::kPydantic,
      [] {
        std::vector<Field<ZeroConfig>> fields = partitioning_fields();
        for (auto part : {offload_and_stage3_fields, extension_fields})
          for (Field<ZeroConfig>& f : part()) fields.push_back(std::move(f));
        return fields;
      }(),
      check_zero);
  return kSection;
}

}  // namespace deepspeed::config
