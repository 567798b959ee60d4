// Config: loading a file or string, the top-level keys, cross-section checks, batch resolution and
// dump. The sections themselves are parsed in their own files (see sections.h).
#include "deepspeed/config.h"

#include <sstream>

#include "config/sections.h"
#include "config/small_file.h"
#include "config/suggest.h"

namespace deepspeed::config {

namespace {

// DeepSpeed features this build does not implement. They are accepted only when switched off, so
// a config written for DeepSpeed never silently loses a feature it asked for.
const std::vector<std::string>& unsupported_sections() {
  static const std::vector<std::string> kSections = {"amp",
                                                     "elasticity",
                                                     "compression_training",
                                                     "curriculum_learning",
                                                     "data_efficiency",
                                                     "sparse_attention",
                                                     "quantize_training",
                                                     "eigenvalue",
                                                     "progressive_layer_drop",
                                                     "hybrid_engine",
                                                     "nebula",
                                                     "weight_quantization",
                                                     "compile",
                                                     "comet",
                                                     "torch_autocast",
                                                     "datastates_ckpt",
                                                     "expert_parallel"};
  return kSections;
}

void check_unsupported(ObjectReader& r, const std::string& key) {
  const Json* v = r.find(key);
  if (!v || v->is_null()) return;
  const bool disabled = v->is_object() && v->contains("enabled") && (*v)["enabled"].is_boolean() &&
                        !(*v)["enabled"].get<bool>();
  if (!disabled) {
    fail_at(key, "DeepSpeed's '" + key +
                     "' is not supported by deepspeed-cpp; remove it or set \"enabled\": false");
  }
}

// Batch keys: "auto" or null means "not given", for the arithmetic to solve ("auto" is recorded
// in `autos` so an unsolvable batch can say so).
std::optional<int64_t> read_batch_key(ObjectReader& r, const std::string& key,
                                      std::set<std::string>* autos) {
  const Json* v = r.find(key);
  if (v && v->is_string() && v->get<std::string>() == "auto") {
    autos->insert(key);
    return std::nullopt;
  }
  if (!v || v->is_null()) return std::nullopt;
  return ObjectReader::to_int(*v, key, 1, std::numeric_limits<int64_t>::max());
}

// The top level's own values: batch sizes, clipping, flags, data types.
void parse_top_level_values(ObjectReader& r, Config* c, std::set<std::string>* autos) {
  c->train_batch_size = read_batch_key(r, "train_batch_size", autos);
  c->train_micro_batch_size_per_gpu = read_batch_key(r, "train_micro_batch_size_per_gpu", autos);
  c->gradient_accumulation_steps = read_batch_key(r, "gradient_accumulation_steps", autos);

  const Json* steps_per_print = r.find("steps_per_print");
  if (steps_per_print && !steps_per_print->is_null()) {
    c->steps_per_print = static_cast<int>(ObjectReader::to_int(*steps_per_print, "steps_per_print",
                                                               1, std::numeric_limits<int>::max()));
  }
  r.read_number("gradient_clipping", &c->gradient_clipping, 0.0,
                std::numeric_limits<double>::infinity(), AutoPolicy::kAllowAuto);
  r.read_bool("wall_clock_breakdown", &c->wall_clock_breakdown);
  r.read_bool("memory_breakdown", &c->memory_breakdown);
  r.read_bool("dump_state", &c->dump_state);
  r.read_bool("prescale_gradients", &c->prescale_gradients);
  r.read_number("gradient_predivide_factor", &c->gradient_predivide_factor, 0.0);
  if (c->gradient_predivide_factor == 0.0) {
    fail_at("gradient_predivide_factor", "expected a number > 0, got 0");
  }
  r.read_bool("sparse_gradients", &c->sparse_gradients);
  r.read_bool("disable_allgather", &c->disable_allgather);
  r.read_bool("dataloader_drop_last", &c->dataloader_drop_last);
  r.read_bool("graph_harvesting", &c->graph_harvesting);
  r.read_bool("use_data_before_expert_parallelism", &c->use_data_before_expert_parallelism);
  r.read_choice("gradient_allreduce_op", &c->gradient_allreduce_op, {"mean", "sum"}, /*case_insensitive=*/true);
  r.read_bool("managed_gradient_accumulation", &c->managed_gradient_accumulation);
  // Keys of DeepSpeed's Python side with nothing to act on here (README: "Keys accepted with no effect"), checked
  // for their type only.
  bool python_gc = false;
  r.read_bool("disable_python_gc", &python_gc);
  std::optional<std::string> log_level;
  r.read_optional_string("log_level", &log_level);
  if (const Json* timers = r.find("timers"); timers && !timers->is_null()) {
    ObjectReader t(*timers, "timers", nullptr);
    if (const Json* throughput = t.find("throughput"); throughput && !throughput->is_null()) {
      ObjectReader tp(*throughput, "timers.throughput", nullptr);
      tp.take_string_booleans();
      bool flag = false;
      tp.read_bool("enabled", &flag);
      tp.read_bool("synchronized", &flag);
      tp.finish();
    }
    t.finish_ignoring_unknown();
  }
  r.read_optional_int("seed", &c->seed, 0);
  r.read_optional_int("vocabulary_size", &c->vocabulary_size, 1);
  const Json* comm_type = r.find("communication_data_type");
  if (comm_type && !comm_type->is_null()) {
    c->communication_data_type = parse_data_type(*comm_type, "communication_data_type");
  }
  const Json* seq_type = r.find("seq_parallel_communication_data_type");
  if (seq_type && !seq_type->is_null()) {
    c->seq_parallel_communication_data_type = parse_data_type(*seq_type, "seq_parallel_communication_data_type");
  }
  r.read_bool("zero_allow_untested_optimizer", &c->zero_allow_untested_optimizer);
  r.read_bool("zero_force_ds_cpu_optimizer", &c->zero_force_ds_cpu_optimizer);
}

// The top level's sections, each parsed by its own reader.
void parse_sections(ObjectReader& r, Config* c, std::set<std::string>* autos) {
  if (const Json* v = r.find("optimizer"); v && !v->is_null()) {
    c->optimizer = parse_optimizer_config(*v);
  }
  if (const Json* v = r.find("scheduler"); v && !v->is_null()) {
    c->scheduler = parse_scheduler_config(*v);
  }
  if (const Json* v = r.find("fp16"); v && !v->is_null()) c->fp16 = parse_fp16_config(*v, autos);
  const Json* bf16 = r.find("bf16");
  const Json* bfloat16 = r.find("bfloat16");  // DeepSpeed's old name
  if (bf16 && bfloat16) fail_at("bfloat16", "old name of 'bf16'; give only bf16");
  if (bf16 && !bf16->is_null()) c->bf16 = parse_bf16_config(*bf16, "bf16", autos);
  if (bfloat16 && !bfloat16->is_null()) {
    c->bf16 = parse_bf16_config(*bfloat16, "bfloat16", autos);
  }
  if (const Json* v = r.find("data_types"); v && !v->is_null()) {
    c->data_types = parse_data_types_config(*v);
  }

  if (const Json* v = r.find("zero_optimization"); v && !v->is_null()) {
    if (v->is_boolean()) {
      // DeepSpeed's oldest format: `"zero_optimization": true` means stage 1, with the bucket
      // size in a top-level `allgather_size`.
      c->zero.stage = v->get<bool>() ? 1 : 0;
      r.read_int("allgather_size", &c->zero.allgather_bucket_size, 0);
    } else {
      c->zero = parse_zero_config(*v, autos);
    }
  }
  if (const Json* v = r.find("aio"); v && !v->is_null()) c->aio = parse_aio_config(*v);
  if (const Json* v = r.find("activation_checkpointing"); v && !v->is_null()) {
    c->activation_checkpointing = parse_activation_checkpointing_config(*v);
  }
  if (const Json* v = r.find("pipeline"); v && !v->is_null()) {
    c->pipeline = parse_pipeline_config(*v);
  }
  if (const Json* v = r.find("checkpoint"); v && !v->is_null()) {
    c->checkpoint = parse_checkpoint_config(*v);
  }
  if (const Json* v = r.find("tensor_parallel"); v && !v->is_null()) {
    c->tensor_parallel = parse_tensor_parallel_config(*v);
  }
  r.read_int("sequence_parallel_size", &c->sequence_parallel_size, 1);
  if (const Json* v = r.find("comms_logger"); v && !v->is_null()) {
    c->comms_logger = parse_comms_logger_config(*v);
  }
  if (const Json* v = r.find("tensorboard"); v && !v->is_null()) {
    c->monitor.tensorboard = parse_file_monitor_config(*v, "tensorboard");
  }
  if (const Json* v = r.find("csv_monitor"); v && !v->is_null()) {
    c->monitor.csv_monitor = parse_file_monitor_config(*v, "csv_monitor");
  }
  if (const Json* v = r.find("wandb"); v && !v->is_null())
    c->monitor.wandb = parse_wandb_config(*v);
  if (const Json* v = r.find("flops_profiler"); v && !v->is_null()) {
    c->flops_profiler = parse_flops_profiler_config(*v);
  }
  if (const Json* v = r.find("autotuning"); v && !v->is_null()) {
    c->autotuning = parse_autotuning_config(*v);
  }
}

void parse_top_level(const Json& root, Config* c, std::set<std::string>* autos) {
  ObjectReader r(root, "", autos);
  parse_top_level_values(r, c, autos);
  parse_sections(r, c, autos);
  for (const std::string& key : unsupported_sections()) check_unsupported(r, key);
  r.finish_ignoring_unknown();
}

Config parse_root(const Json& root) {
  Config c;
  std::set<std::string> autos;
  std::vector<std::string> warnings;
  {
    CollectWarnings collect(&warnings);
    parse_top_level(root, &c, &autos);
  }
  for (std::string& w : warnings) c.add_warning(std::move(w));
  for (const std::string& path : autos) c.mark_auto(path);
  check_consistency(c);
  check_implemented_values(c);
  return c;
}

// Writes "auto" at a dotted path of `j` (every key on it exists: dump() wrote them).
void set_auto(OrderedJson& j, const std::string& path) {
  OrderedJson* node = &j;
  std::stringstream ss(path);
  std::string key;
  while (std::getline(ss, key, '.')) {
    if (!node->is_object() || !node->contains(key)) return;
    node = &(*node)[key];
  }
  *node = "auto";
}

}  // namespace

// Checks that span sections, as DeepSpeed's _do_error_check does.
// Run again by resolve_auto once "auto" precision flags are filled (until then the flags are not known).
void check_consistency(const Config& c) {
  if (c.tensor_parallel.dtype && !c.is_auto("fp16.enabled") && !c.is_auto("bf16.enabled")) {
    const std::string ours = c.bf16.enabled ? "bf16" : c.fp16.enabled ? "fp16" : "fp32";
    if (*c.tensor_parallel.dtype != ours)
      fail_at("tensor_parallel.dtype", "is " + *c.tensor_parallel.dtype + " but the model trains in " + ours +
                                           " (fp16 / bf16 sections); make them agree or drop the key");
  }
  if (c.fp16.enabled && c.bf16.enabled) {
    fail_at("bf16.enabled", "cannot be true together with fp16.enabled; choose one precision");
  }
  if (c.fp16.fp16_master_weights_and_grads && c.zero.stage == 0) {
    fail_at("fp16.fp16_master_weights_and_grads", "needs zero_optimization.stage 1, 2 or 3, got 0");
  }
  if (c.bf16.bf16_master_weights_and_grads && c.zero.stage == 0) {
    fail_at("bf16.bf16_master_weights_and_grads", "needs zero_optimization.stage 1, 2 or 3, got 0");
  }
}

Config Config::from_string(const std::string& json_text) {
  return parse_root(parse_json_text(json_text, "<string>"));
}

Config Config::from_file(const std::string& path) { return from_file(path, {}); }

Config Config::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::string text;
  const std::string why = read_small_file(path, &text);
  if (!why.empty()) throw ConfigError(::deepspeed::detail::printable(path) + ": cannot read config file: " + why);
  Json root = parse_json_text(text, path);
  for (const std::string& assignment : overrides) apply_override(&root, assignment);
  try {
    Config c = parse_root(root);
    c.name_warnings_after(::deepspeed::detail::printable(path));
    return c;
  } catch (const ConfigError& e) {
    // A key's error names the file it is in, as the syntax errors do (a program may read several configs).
    throw ConfigError(::deepspeed::detail::printable(path) + ": " + e.what());
  }
}

void Config::mark_auto(const std::string& json_path) {
  if (json_path == "train_batch_size" || json_path == "train_micro_batch_size_per_gpu" ||
      json_path == "gradient_accumulation_steps") {
    auto_batch_keys_.insert(json_path);
  } else {
    auto_keys_.insert(json_path);
  }
}

void Config::resolve_batch(int world_size) {
  // Hugging Face's Trainer fills the batch keys from its arguments; without it an all-"auto" batch
  // has nothing to solve from, and saying "must be given" about a key that is given misleads.
  if (!train_batch_size && !train_micro_batch_size_per_gpu && !auto_batch_keys_.empty()) {
    const std::string key = auto_batch_keys_.count("train_micro_batch_size_per_gpu")
                                ? "train_micro_batch_size_per_gpu"
                                : "train_batch_size";
    throw ConfigError(key +
                      ": \"auto\" is filled by Hugging Face's Trainer, which deepspeed-cpp "
                      "does not have, and the other batch keys cannot solve it; give a number "
                      "(ds_check_config: --set " +
                      key + "=N)");
  }
  BatchSizes b = resolve_batch_sizes(train_batch_size, train_micro_batch_size_per_gpu,
                                     gradient_accumulation_steps, world_size);
  train_batch_size = b.train_batch_size;
  train_micro_batch_size_per_gpu = b.train_micro_batch_size_per_gpu;
  gradient_accumulation_steps = b.gradient_accumulation_steps;
  dp_world_size = world_size;
}

Config Config::resolved(int world_size) const {
  Config copy = *this;
  copy.resolve_batch(world_size);
  return copy;
}

std::string Config::dump(int indent) const {
  OrderedJson j;
  if (train_batch_size) j["train_batch_size"] = *train_batch_size;
  if (train_micro_batch_size_per_gpu) {
    j["train_micro_batch_size_per_gpu"] = *train_micro_batch_size_per_gpu;
  }
  if (gradient_accumulation_steps) j["gradient_accumulation_steps"] = *gradient_accumulation_steps;
  j["steps_per_print"] = steps_per_print;
  j["gradient_clipping"] = gradient_clipping;
  j["wall_clock_breakdown"] = wall_clock_breakdown;
  j["memory_breakdown"] = memory_breakdown;
  j["dump_state"] = dump_state;
  j["prescale_gradients"] = prescale_gradients;
  j["gradient_predivide_factor"] = gradient_predivide_factor;
  j["sparse_gradients"] = sparse_gradients;
  j["disable_allgather"] = disable_allgather;
  j["dataloader_drop_last"] = dataloader_drop_last;
  j["graph_harvesting"] = graph_harvesting;
  j["use_data_before_expert_parallelism"] = use_data_before_expert_parallelism;
  j["gradient_allreduce_op"] = gradient_allreduce_op;
  j["managed_gradient_accumulation"] = managed_gradient_accumulation;
  if (seed) j["seed"] = *seed;  // ours, not DeepSpeed's: written only when set
  j["vocabulary_size"] = optional_json(vocabulary_size);
  j["communication_data_type"] =
      communication_data_type ? OrderedJson(to_string(*communication_data_type)) : nullptr;
  j["seq_parallel_communication_data_type"] = to_string(seq_parallel_communication_data_type);
  j["zero_allow_untested_optimizer"] = zero_allow_untested_optimizer;
  j["zero_force_ds_cpu_optimizer"] = zero_force_ds_cpu_optimizer;
  if (optimizer) j["optimizer"] = dump_optimizer_config(*optimizer);
  if (scheduler) j["scheduler"] = dump_scheduler_config(*scheduler);
  j["fp16"] = dump_fp16_config(fp16);
  j["bf16"] = dump_bf16_config(bf16);
  j["data_types"] = dump_data_types_config(data_types);
  j["zero_optimization"] = dump_zero_config(zero);
  j["aio"] = dump_aio_config(aio);
  j["activation_checkpointing"] = dump_activation_checkpointing_config(activation_checkpointing);
  j["pipeline"] = dump_pipeline_config(pipeline);
  j["checkpoint"] = dump_checkpoint_config(checkpoint);
  j["tensor_parallel"] = dump_tensor_parallel_config(tensor_parallel);
  j["sequence_parallel_size"] = sequence_parallel_size;
  j["comms_logger"] = dump_comms_logger_config(comms_logger);
  j["tensorboard"] = dump_file_monitor_config(monitor.tensorboard);
  j["csv_monitor"] = dump_file_monitor_config(monitor.csv_monitor);
  j["wandb"] = dump_wandb_config(monitor.wandb);
  j["flops_profiler"] = dump_flops_profiler_config(flops_profiler);
  j["autotuning"] = dump_autotuning_config(autotuning);
  for (const std::string& path : auto_keys_) set_auto(j, path);
  return j.dump(indent);
}

}  // namespace deepspeed::config
