// zero_optimization: parse, validate and dump (keys and defaults from DeepSpeed's
// runtime/zero/config.py and offload_config.py).
#include <limits>

#include "config/sections.h"

namespace deepspeed::config {

namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();
const char kPath[] = "zero_optimization";

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

OffloadOptimizerConfig parse_offload_optimizer(const Json& node) {
  const std::string path = join_path(kPath, "offload_optimizer");
  ObjectReader r(node, path, nullptr);
  r.take_string_booleans();
  OffloadOptimizerConfig c;
  std::string device = "none";
  r.read_choice("device", &device, offload_devices());
  c.device = device_from_string(device);
  r.read_optional_string("nvme_path", &c.nvme_path);
  r.read_int("buffer_count", &c.buffer_count, 0);
  r.read_bool("pin_memory", &c.pin_memory);
  r.read_bool("pipeline_read", &c.pipeline_read);
  r.read_bool("pipeline_write", &c.pipeline_write);
  r.read_bool("fast_init", &c.fast_init);
  r.read_number("ratio", &c.ratio, 0.0, 1.0);
  r.read_bool("overlap_step", &c.overlap_step);
  r.read_bool("super_offload", &c.super_offload);
  r.read_number("cpuadam_cores_perc", &c.cpuadam_cores_perc, 0.0, 1.0);
  r.finish();
  check_nvme_path(c.device, c.nvme_path, path);
  return c;
}

OffloadParamConfig parse_offload_param(const Json& node) {
  const std::string path = join_path(kPath, "offload_param");
  ObjectReader r(node, path, nullptr);
  r.take_string_booleans();
  OffloadParamConfig c;
  std::string device = "none";
  r.read_choice("device", &device, offload_devices());
  c.device = device_from_string(device);
  r.read_optional_string("nvme_path", &c.nvme_path);
  r.read_int("buffer_count", &c.buffer_count, 0);
  r.read_int("buffer_size", &c.buffer_size, 0);
  r.read_int("max_in_cpu", &c.max_in_cpu, 0);
  r.read_bool("pin_memory", &c.pin_memory);
  r.finish();
  check_nvme_path(c.device, c.nvme_path, path);
  return c;
}

// "auto" (nullopt) or a whole number >= lo: ZenFlow's select_interval and update_interval.
void read_auto_or_int(ObjectReader& r, const std::string& key, std::optional<int64_t>* out, int64_t lo) {
  int64_t v = 0;
  if (r.read_int(key, &v, lo, kMaxInt64, AutoPolicy::kAllowAuto)) *out = v;
}

ZenFlowConfig parse_zenflow(const Json& node) {
  const std::string path = join_path(kPath, "zenflow");
  ObjectReader r(node, path, nullptr);
  r.take_string_booleans();
  ZenFlowConfig c;
  r.read_number("topk_ratio", &c.topk_ratio, 0.0, 1.0);
  if (c.topk_ratio <= 0.0 || c.topk_ratio >= 1.0)
    fail_at(r.path_of("topk_ratio"), "must lie strictly between 0 and 1, got " + std::to_string(c.topk_ratio));
  r.read_choice("select_strategy", &c.select_strategy, {"auto", "step", "epoch"});
  read_auto_or_int(r, "select_interval", &c.select_interval, 0);
  read_auto_or_int(r, "update_interval", &c.update_interval, 1);
  r.read_bool("overlap_step", &c.overlap_step);
  r.read_bool("offload", &c.offload);
  r.read_number("auto_ratio", &c.auto_ratio, 0.0, 1.0);
  r.read_int("full_warm_up_rounds", &c.full_warm_up_rounds, 0);
  double cores = 0.0;
  if (r.read_number("pt_reserved_cores_perc", &cores, 0.0, 1.0)) c.pt_reserved_cores_perc = cores;
  // DeepSpeed fills it from its training dataloader; the engine here has none, so the config gives it.
  r.read_optional_int("steps_per_epoch", &c.steps_per_epoch, 1);
  r.finish();
  // DeepSpeed's own checks (ZenFlowConfig / configure_zenflow), same meaning.
  if (c.select_strategy == "auto" && c.select_interval)
    fail_at(r.path_of("select_interval"), "select_strategy \"auto\" selects once per epoch; remove select_interval "
                                          "or set select_strategy to \"step\" or \"epoch\"");
  if (c.select_strategy != "auto" && !c.select_interval)
    fail_at(r.path_of("select_interval"), "select_strategy \"" + c.select_strategy + "\" needs a number");
  return c;
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

// A stage-3 knob that DeepSpeed accepts as `stage3_<name>` (documented) or `<name>` (its field name).
void read_stage3_int(ObjectReader& r, const std::string& name, int64_t* out, std::set<std::string>* autos) {
  const std::string documented = "stage3_" + name;
  const std::string key = r.pick_alias(documented, name);
  r.read_int(key, out, 0, kMaxInt64, AutoPolicy::kAllowAuto);
  keep_default_for_alias_auto(r, key, documented, std::to_string(*out), autos);
}

// "auto" only where accelerate fills it (gather_16bit_weights_on_model_save); DeepSpeed refuses it elsewhere.
void read_stage3_bool(ObjectReader& r, const std::string& name, bool* out, std::set<std::string>* autos,
                      AutoPolicy policy = AutoPolicy::kNoAuto) {
  const std::string documented = "stage3_" + name;
  const std::string key = r.pick_alias(documented, name);
  r.read_bool(key, out, policy);
  keep_default_for_alias_auto(r, key, documented, *out ? "true" : "false", autos);
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

// Partitioning and reduction: the stage, buckets, overlap.
void read_partitioning(ObjectReader& r, ZeroConfig& z) {
  r.read_int("stage", &z.stage, 0, 3);
  r.read_bool("contiguous_gradients", &z.contiguous_gradients);
  r.read_bool("reduce_scatter", &z.reduce_scatter);
  r.read_int("reduce_bucket_size", &z.reduce_bucket_size, 0, kMaxInt64, AutoPolicy::kAllowAuto);
  r.read_bool("use_multi_rank_bucket_allreduce", &z.use_multi_rank_bucket_allreduce);
  r.read_bool("allgather_partitions", &z.allgather_partitions);
  r.read_int("allgather_bucket_size", &z.allgather_bucket_size, 0, kMaxInt64,
             AutoPolicy::kAllowAuto);
  // DeepSpeed's overlap_comm is Optional: unset means "on for stage 3 only".
  z.overlap_comm = z.stage == 3;
  r.read_bool("overlap_comm", &z.overlap_comm);
  r.read_bool("compute_grad_norm", &z.compute_grad_norm);
  r.read_bool("load_from_fp32_weights", &z.load_from_fp32_weights);
  r.read_bool("elastic_checkpoint", &z.elastic_checkpoint);
  r.read_int("sub_group_size", &z.sub_group_size, 0);
}

// offload_optimizer and offload_param, with the deprecated spellings DeepSpeed still maps onto them.
void read_offload(ObjectReader& r, ZeroConfig& z) {
  const Json* offload_optimizer = r.find("offload_optimizer");
  if (offload_optimizer && !offload_optimizer->is_null()) {
    z.offload_optimizer = parse_offload_optimizer(*offload_optimizer);
  }
  const Json* offload_param = r.find("offload_param");
  if (offload_param && !offload_param->is_null()) {
    z.offload_param = parse_offload_param(*offload_param);
  }

  // Deprecated spellings DeepSpeed still maps onto their replacements.
  bool cpu_offload = false;
  if (r.read_bool("cpu_offload", &cpu_offload) && cpu_offload) {
    if (offload_optimizer && !offload_optimizer->is_null()) {
      fail_at(r.path_of("cpu_offload"),
              "deprecated alias of offload_optimizer; give only offload_optimizer");
    }
    z.offload_optimizer.device = OffloadDevice::kCpu;
  }
  bool cpu_offload_param = false;
  if (r.read_bool("cpu_offload_param", &cpu_offload_param) && cpu_offload_param) {
    if (offload_param && !offload_param->is_null()) {
      fail_at(r.path_of("cpu_offload_param"),
              "deprecated alias of offload_param; give only offload_param");
    }
    z.offload_param.device = OffloadDevice::kCpu;
  }
  bool unused_pin = false;  // DeepSpeed accepts and ignores it (no replacement is set)
  r.read_bool("cpu_offload_use_pin_memory", &unused_pin);
}

// Stage 3's gathering and persistence knobs, under their stage3_ names or DeepSpeed's field names.
void read_stage3_keys(ObjectReader& r, ZeroConfig& z, std::set<std::string>* autos) {
  read_stage3_int(r, "prefetch_bucket_size", &z.prefetch_bucket_size, autos);
  read_stage3_int(r, "param_persistence_threshold", &z.param_persistence_threshold, autos);
  read_stage3_int(r, "model_persistence_threshold", &z.model_persistence_threshold, autos);
  read_stage3_int(r, "max_live_parameters", &z.max_live_parameters, autos);
  read_stage3_int(r, "max_reuse_distance", &z.max_reuse_distance, autos);
  read_stage3_bool(r, "gather_16bit_weights_on_model_save", &z.gather_16bit_weights_on_model_save, autos,
                   AutoPolicy::kAllowAuto);
  bool gather_fp16 = false;
  if (r.read_bool("stage3_gather_fp16_weights_on_model_save", &gather_fp16) && gather_fp16) {
    z.gather_16bit_weights_on_model_save = true;
  }
  r.read_int(r.pick_alias("stage3_module_granularity_threshold", "module_granularity_threshold"),
             &z.module_granularity_threshold, 0);
  read_stage3_bool(r, "use_all_reduce_for_fetch_params", &z.use_all_reduce_for_fetch_params, autos);
  read_stage3_bool(r, "allgather_sequential", &z.allgather_sequential, autos);
}

// ZeRO++, MiCS, leaf modules and the flags DeepSpeed reads beside them.
void read_extensions(ObjectReader& r, ZeroConfig& z) {
  r.read_bool("ignore_unused_parameters", &z.ignore_unused_parameters);
  r.read_bool("legacy_stage1", &z.legacy_stage1);
  r.read_bool("round_robin_gradients", &z.round_robin_gradients);
  r.read_int("zero_hpz_partition_size", &z.zero_hpz_partition_size, 0);
  r.read_bool("zero_quantized_weights", &z.zero_quantized_weights);
  r.read_bool("zero_quantized_nontrainable_weights", &z.zero_quantized_nontrainable_weights);
  r.read_bool("zero_quantized_gradients", &z.zero_quantized_gradients);
  r.read_int("mics_shard_size", &z.mics_shard_size);
  r.read_bool("mics_hierarchical_params_gather", &z.mics_hierarchical_params_gather);
  r.read_bool("memory_efficient_linear", &z.memory_efficient_linear);
  r.read_bool("pipeline_loading_checkpoint", &z.pipeline_loading_checkpoint);
  r.read_bool("override_module_apply", &z.override_module_apply);
  r.read_bool("log_trace_cache_warnings", &z.log_trace_cache_warnings);
  r.read_bool("enable_sanity_checks", &z.enable_sanity_checks);
  r.read_bool("parameter_alignment", &z.parameter_alignment);
  r.read_bool("save_muon_momentum_buffer_in_memory", &z.save_muon_momentum_buffer_in_memory);
  if (const Json* leaf = r.find("leaf_module"); leaf && !leaf->is_null()) {
    ObjectReader l(*leaf, r.path_of("leaf_module"), nullptr);
    l.take_string_booleans();
    // DeepSpeed takes a single string for a list of one.
    auto read_list = [&l](const std::string& key, std::vector<std::string>* out) {
      const Json* v = l.find(key);
      if (v && v->is_string()) {
        *out = {v->get<std::string>()};
      } else {
        l.read_string_list(key, out);
      }
    };
    read_list("classes", &z.leaf_module_classes);
    read_list("names", &z.leaf_module_names);
    read_list("name_suffixes", &z.leaf_module_name_suffixes);
    l.finish();
  }
}

}  // namespace

ZeroConfig parse_zero_config(const Json& node, std::set<std::string>* autos) {
  ObjectReader r(node, kPath, autos);
  r.take_string_booleans();
  ZeroConfig z;
  read_partitioning(r, z);
  read_offload(r, z);
  read_stage3_keys(r, z, autos);
  read_extensions(r, z);
  const Json* zenflow = r.find("zenflow");
  if (zenflow && !zenflow->is_null()) z.zenflow = parse_zenflow(*zenflow);
  r.finish();
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
  return z;
}

OrderedJson dump_zero_config(const ZeroConfig& z) {
  OrderedJson oo;
  oo["device"] = to_string(z.offload_optimizer.device);
  oo["nvme_path"] = optional_json(z.offload_optimizer.nvme_path);
  oo["buffer_count"] = z.offload_optimizer.buffer_count;
  oo["pin_memory"] = z.offload_optimizer.pin_memory;
  oo["pipeline_read"] = z.offload_optimizer.pipeline_read;
  oo["pipeline_write"] = z.offload_optimizer.pipeline_write;
  oo["fast_init"] = z.offload_optimizer.fast_init;
  oo["ratio"] = z.offload_optimizer.ratio;
  oo["overlap_step"] = z.offload_optimizer.overlap_step;
  oo["super_offload"] = z.offload_optimizer.super_offload;
  oo["cpuadam_cores_perc"] = z.offload_optimizer.cpuadam_cores_perc;

  OrderedJson op;
  op["device"] = to_string(z.offload_param.device);
  op["nvme_path"] = optional_json(z.offload_param.nvme_path);
  op["buffer_count"] = z.offload_param.buffer_count;
  op["buffer_size"] = z.offload_param.buffer_size;
  op["max_in_cpu"] = z.offload_param.max_in_cpu;
  op["pin_memory"] = z.offload_param.pin_memory;

  OrderedJson j;
  j["stage"] = z.stage;
  j["contiguous_gradients"] = z.contiguous_gradients;
  j["reduce_scatter"] = z.reduce_scatter;
  j["reduce_bucket_size"] = z.reduce_bucket_size;
  j["use_multi_rank_bucket_allreduce"] = z.use_multi_rank_bucket_allreduce;
  j["allgather_partitions"] = z.allgather_partitions;
  j["allgather_bucket_size"] = z.allgather_bucket_size;
  j["overlap_comm"] = z.overlap_comm;
  j["compute_grad_norm"] = z.compute_grad_norm;
  j["load_from_fp32_weights"] = z.load_from_fp32_weights;
  j["elastic_checkpoint"] = z.elastic_checkpoint;
  j["offload_param"] = op;
  j["offload_optimizer"] = oo;
  j["sub_group_size"] = z.sub_group_size;
  j["stage3_prefetch_bucket_size"] = z.prefetch_bucket_size;
  j["stage3_param_persistence_threshold"] = z.param_persistence_threshold;
  j["stage3_model_persistence_threshold"] = z.model_persistence_threshold;
  j["stage3_max_live_parameters"] = z.max_live_parameters;
  j["stage3_max_reuse_distance"] = z.max_reuse_distance;
  j["stage3_gather_16bit_weights_on_model_save"] = z.gather_16bit_weights_on_model_save;
  j["stage3_module_granularity_threshold"] = z.module_granularity_threshold;
  j["stage3_use_all_reduce_for_fetch_params"] = z.use_all_reduce_for_fetch_params;
  j["stage3_allgather_sequential"] = z.allgather_sequential;
  j["ignore_unused_parameters"] = z.ignore_unused_parameters;
  j["legacy_stage1"] = z.legacy_stage1;
  j["round_robin_gradients"] = z.round_robin_gradients;
  j["parameter_alignment"] = z.parameter_alignment;
  j["save_muon_momentum_buffer_in_memory"] = z.save_muon_momentum_buffer_in_memory;
  j["zero_hpz_partition_size"] = z.zero_hpz_partition_size;
  j["zero_quantized_weights"] = z.zero_quantized_weights;
  j["zero_quantized_nontrainable_weights"] = z.zero_quantized_nontrainable_weights;
  j["zero_quantized_gradients"] = z.zero_quantized_gradients;
  j["mics_shard_size"] = z.mics_shard_size;
  j["mics_hierarchical_params_gather"] = z.mics_hierarchical_params_gather;
  j["memory_efficient_linear"] = z.memory_efficient_linear;
  j["pipeline_loading_checkpoint"] = z.pipeline_loading_checkpoint;
  j["override_module_apply"] = z.override_module_apply;
  j["log_trace_cache_warnings"] = z.log_trace_cache_warnings;
  j["enable_sanity_checks"] = z.enable_sanity_checks;
  OrderedJson zf;
  if (z.zenflow) {
    const ZenFlowConfig& c = *z.zenflow;
    zf["topk_ratio"] = c.topk_ratio;
    zf["select_strategy"] = c.select_strategy;
    zf["select_interval"] = c.select_interval ? OrderedJson(*c.select_interval) : OrderedJson("auto");
    zf["update_interval"] = c.update_interval ? OrderedJson(*c.update_interval) : OrderedJson("auto");
    zf["overlap_step"] = c.overlap_step;
    zf["offload"] = c.offload;
    zf["auto_ratio"] = c.auto_ratio;
    zf["full_warm_up_rounds"] = c.full_warm_up_rounds;
    if (c.pt_reserved_cores_perc) zf["pt_reserved_cores_perc"] = *c.pt_reserved_cores_perc;
    if (c.steps_per_epoch) zf["steps_per_epoch"] = *c.steps_per_epoch;
  }
  j["zenflow"] = zf;
  return j;
}

}  // namespace deepspeed::config
