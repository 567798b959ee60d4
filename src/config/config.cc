// Config: loading a file or string, the top-level keys, cross-section checks, batch resolution and
// dump. The sections themselves are parsed in their own files (see sections.h).
#include "deepspeed/config.h"

#include <sstream>

#include "config/implemented_values.h"
#include "config/sections.h"
#include "config/small_file.h"
#include "config/suggest.h"

namespace deepspeed::config {

namespace {

// An unsupported section: accepted only when absent, null or `"enabled": false`. Not dumped.
Field<Config> unsupported_key(const std::string& key) { return disabled_only_key<Config>(key, "'" + key + "'"); }

// Batch keys: "auto" or null means "not given", for the arithmetic to solve ("auto" is recorded so an unsolvable
// batch can say so). Dumped only when known.
Field<Config> batch_key(const std::string& key, std::optional<int64_t> Config::*m, std::string ours) {
  return custom_key<Config>(
      key, "integer >= 1 or null", std::move(ours),
      [m](ObjectReader& r, const std::string& name, Config& c) {
        const Json* v = r.find(name);
        if (v && v->is_string() && v->get<std::string>() == "auto") {
          if (r.autos()) r.autos()->insert(name);
          return;
        }
        if (v && !v->is_null()) c.*m = ObjectReader::to_int(*v, name, 1, std::numeric_limits<int64_t>::max());
      },
      [m](const Config& c) -> std::optional<OrderedJson> {
        if (!(c.*m)) return std::nullopt;
        return OrderedJson(*(c.*m));
      },
      /*accepts_auto=*/true);
}

// Keys of DeepSpeed's Python side with nothing to act on here (README: "Keys accepted with no effect"), checked for
// their type only. Not dumped.
Field<Config> python_side_key(const std::string& key, const std::string& type, std::string ours) {
  return custom_key<Config>(
      key, type, std::move(ours),
      [type](ObjectReader& r, const std::string& name, Config&) {
        if (type == "bool") {
          bool unused = false;
          r.read_bool(name, &unused);
        } else {
          std::optional<std::string> unused;
          r.read_optional_string(name, &unused);
        }
      },
      [](const Config&) { return std::optional<OrderedJson>(); });
}

struct Throughput {
  bool enabled = false, synchronized = false;
};
struct Timers {
  Throughput throughput;
};

const Section<Throughput>& throughput_section() {
  static const Section<Throughput> kSection(
      SectionKind::kPydantic,
      {bool_key<Throughput>("enabled", &Throughput::enabled, "no effect: DeepSpeed's log-line throughput timer"),
       bool_key<Throughput>("synchronized", &Throughput::synchronized, "no effect: see enabled")});
  return kSection;
}

const Section<Timers>& timers_section() {
  static const Section<Timers> kSection(SectionKind::kDict,
                                        {section_key<Timers>("throughput", &Timers::throughput, throughput_section(),
                                                             "no effect (ours prints samples/s in the step line)")});
  return kSection;
}

// A top-level data type key (communication dtypes).
Field<Config> data_type_key(const std::string& key, std::function<void(Config&, DataType)> set,
                            std::function<OrderedJson(const Config&)> get, std::string ours) {
  return custom_key<Config>(
      key, "one of fp16, bf16, fp32 (any case) or null", std::move(ours),
      [set](ObjectReader& r, const std::string& name, Config& c) {
        const Json* v = r.find(name);
        if (v && !v->is_null()) set(c, parse_data_type(*v, name));
      },
      [get](const Config& c) { return std::optional<OrderedJson>(get(c)); });
}

// A section at a member of a member (the monitors).
template <class M>
Field<Config> monitor_key(const std::string& key, M MonitorConfig::*m, const Section<M>& section, std::string ours) {
  const Section<M>* sec = &section;
  return with_keys_of(custom_key<Config>(
                          key, "section", std::move(ours),
                          [m, sec](ObjectReader& r, const std::string& name, Config& c) {
                            const Json* v = r.find(name);
                            if (v && !v->is_null()) c.monitor.*m = sec->parse(*v, name, nullptr);
                          },
                          [m, sec](const Config& c) { return std::optional<OrderedJson>(sec->dump(c.monitor.*m)); }),
                      section);
}

// A section parsed and dumped by its own functions (sections.h), stored as an optional or a value; `catalogue`
// lists its keys.
template <class M>
Field<Config> own_section_key(const std::string& key, std::optional<M> Config::*m, M (*parse)(const Json&),
                              OrderedJson (*dump)(const M&), std::vector<KeyInfo> (*catalogue)(const std::string&),
                              std::string ours) {
  Field<Config> f = custom_key<Config>(
      key, "section", std::move(ours),
      [m, parse](ObjectReader& r, const std::string& name, Config& c) {
        const Json* v = r.find(name);
        if (v && !v->is_null()) c.*m = parse(*v);
      },
      [m, dump](const Config& c) -> std::optional<OrderedJson> {
        if (!(c.*m)) return std::nullopt;
        return dump(*(c.*m));
      });
  f.children = catalogue;
  return f;
}

// The top level's own values: batch sizes, clipping, flags, data types.
std::vector<Field<Config>> top_level_values() {
  using C = Config;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<Field<C>> f = {
      batch_key("train_batch_size", &C::train_batch_size, "global batch: micro-batch x accumulation x data ranks"),
      batch_key("train_micro_batch_size_per_gpu", &C::train_micro_batch_size_per_gpu, "samples per rank per step"),
      batch_key("gradient_accumulation_steps", &C::gradient_accumulation_steps, "micro-batches per optimizer step"),
      custom_key<C>(
          "steps_per_print", "integer >= 1 or null", "print the step line every N steps",
          [](ObjectReader& r, const std::string& key, C& c) {
            const Json* v = r.find(key);
            if (v && !v->is_null())
              c.steps_per_print = static_cast<int>(ObjectReader::to_int(*v, key, 1, std::numeric_limits<int>::max()));
          },
          [](const C& c) { return std::optional<OrderedJson>(c.steps_per_print); }),
      number_key<C>("gradient_clipping", &C::gradient_clipping, 0.0, kInf,
                    "clip the global gradient norm to this (0: off)", AutoPolicy::kAllowAuto),
      bool_key<C>("wall_clock_breakdown", &C::wall_clock_breakdown, "time forward, backward and step"),
      bool_key<C>("memory_breakdown", &C::memory_breakdown, "print memory use at each phase"),
      bool_key<C>("dump_state", &C::dump_state, "print the resolved config at start-up"),
      bool_key<C>("prescale_gradients", &C::prescale_gradients, "divide gradients before the reduction"),
      custom_key<C>(
          "gradient_predivide_factor", "number > 0", "with prescale_gradients: divide by this before, the rest after",
          [](ObjectReader& r, const std::string& key, C& c) {
            r.read_number(key, &c.gradient_predivide_factor, 0.0);
            if (c.gradient_predivide_factor == 0.0) fail_at(key, "expected a number > 0, got 0");
          },
          [](const C& c) { return std::optional<OrderedJson>(c.gradient_predivide_factor); }),
      removed_in_deepspeed(bool_key<C>("sparse_gradients", &C::sparse_gradients, "refused when true")),
      bool_key<C>("disable_allgather", &C::disable_allgather, "refused when true"),
      bool_key<C>("dataloader_drop_last", &C::dataloader_drop_last,
                  "DataParallelSampler always drops the last partial batch; false is refused"),
      removed_in_deepspeed(bool_key<C>("graph_harvesting", &C::graph_harvesting, "refused when true")),
      bool_key<C>("use_data_before_expert_parallelism", &C::use_data_before_expert_parallelism, "refused when true"),
      choice_key<C>("gradient_allreduce_op", &C::gradient_allreduce_op, {"mean", "sum"},
                    "how data-parallel gradients combine", /*case_insensitive=*/true),
      bool_key<C>("managed_gradient_accumulation", &C::managed_gradient_accumulation,
                  "the engine accumulates over gradient_accumulation_steps; false is refused"),
      python_side_key("disable_python_gc", "bool", "no effect: DeepSpeed's Python garbage collector"),
      python_side_key("log_level", "string or null", "no effect: DeepSpeed's Python logger"),
      with_keys_of(custom_key<C>(
                       "timers", "section", "no effect: DeepSpeed's Python-side timers",
                       [](ObjectReader& r, const std::string& key, C&) {
                         const Json* v = r.find(key);
                         if (v && !v->is_null()) timers_section().parse(*v, key, nullptr);
                       },
                       [](const C&) { return std::optional<OrderedJson>(); }),
                   timers_section()),
      custom_key<C>(
          "seed", "integer >= 0 or null", "ours: seeds the engine's generators",
          [](ObjectReader& r, const std::string& key, C& c) {
            r.read_optional_int(key, &c.seed, 0, std::numeric_limits<int64_t>::max());
          },
          [](const C& c) -> std::optional<OrderedJson> {  // ours, not DeepSpeed's: written only when set
            if (!c.seed) return std::nullopt;
            return OrderedJson(*c.seed);
          }),
      optional_int_key<C, int64_t>("vocabulary_size", &C::vocabulary_size, 1,
                                   "no effect: DeepSpeed only warns when not a multiple of 8"),
      data_type_key(
          "communication_data_type", [](C& c, DataType t) { c.communication_data_type = t; },
          [](const C& c) {
            return c.communication_data_type ? OrderedJson(to_string(*c.communication_data_type))
                                             : OrderedJson(nullptr);
          },
          "dtype of gradient reductions (null: the training dtype)"),
      data_type_key(
          "seq_parallel_communication_data_type", [](C& c, DataType t) { c.seq_parallel_communication_data_type = t; },
          [](const C& c) { return OrderedJson(to_string(c.seq_parallel_communication_data_type)); },
          "dtype of sequence-parallel all-to-alls"),
      bool_key<C>("zero_allow_untested_optimizer", &C::zero_allow_untested_optimizer,
                  "permission for a client optimizer beside ZeRO (initialize refuses one by name)"),
      bool_key<C>("zero_force_ds_cpu_optimizer", &C::zero_force_ds_cpu_optimizer,
                  "the offloaded step is always ours here"),
  };
  return f;
}

// The top level's sections, and DeepSpeed's sections this build refuses.
std::vector<Field<Config>> top_level_sections() {
  using C = Config;
  std::vector<Field<C>> f = {
      own_section_key<OptimizerConfig>("optimizer", &C::optimizer, parse_optimizer_config, dump_optimizer_config,
                                       optimizer_catalogue, "the optimizer: type and params"),
      own_section_key<SchedulerConfig>("scheduler", &C::scheduler, parse_scheduler_config, dump_scheduler_config,
                                       scheduler_catalogue, "the learning-rate schedule: type and params"),
      section_key<C>("fp16", &C::fp16, fp16_section(), "fp16 training with loss scaling"),
      section_key<C>("bf16", &C::bf16, bf16_section(), "bf16 training").alias("bfloat16"),
      section_key<C>("data_types", &C::data_types, data_types_section(), "dtypes of accumulation and storage"),
      with_keys_of(custom_key<C>(
                       "zero_optimization", "section (or true/false: stage 1/0)",
                       "ZeRO: partition optimizer states, "
                       "gradients and parameters over the data-parallel ranks",
                       [](ObjectReader& r, const std::string& key, C& c) {
                         const Json* v = r.find(key);
                         if (!v || v->is_null()) return;
                         if (v->is_boolean()) {
                           c.zero.stage = v->get<bool>() ? 1 : 0;  // DeepSpeed's oldest format, with allgather_size
                         } else {
                           c.zero = zero_section().parse(*v, key, r.autos());
                         }
                       },
                       [](const C& c) { return std::optional<OrderedJson>(zero_section().dump(c.zero)); }),
                   zero_section()),
      custom_key<C>(
          "allgather_size", "integer >= 0", "with \"zero_optimization\": true only: its allgather_bucket_size",
          [](ObjectReader& r, const std::string& key, C& c) {
            const Json* zero = r.find("zero_optimization");
            if (zero && zero->is_boolean()) r.read_int(key, &c.zero.allgather_bucket_size, 0);
          },
          [](const C&) { return std::optional<OrderedJson>(); }),
      section_key<C>("aio", &C::aio, aio_section(), "NVMe swap I/O"),
      section_key<C>("activation_checkpointing", &C::activation_checkpointing, activation_checkpointing_section(),
                     "recompute activations in backward"),
      section_key<C>("pipeline", &C::pipeline, pipeline_section(), "pipeline parallelism (pipe::initialize)"),
      section_key<C>("checkpoint", &C::checkpoint, checkpoint_section(), "checkpoint saving and loading"),
      section_key<C>("tensor_parallel", &C::tensor_parallel, tensor_parallel_section(), "AutoTP training"),
      int_key<C, int>("sequence_parallel_size", &C::sequence_parallel_size, 1,
                      "ranks a sequence is split over (Ulysses)"),
      section_key<C>("comms_logger", &C::comms_logger, comms_logger_section(), "log collectives"),
      monitor_key("tensorboard", &MonitorConfig::tensorboard, file_monitor_section(), "TensorBoard event files"),
      monitor_key("csv_monitor", &MonitorConfig::csv_monitor, file_monitor_section(), "CSV files per metric"),
      monitor_key("wandb", &MonitorConfig::wandb, wandb_section(), "Weights & Biases"),
      section_key<C>("flops_profiler", &C::flops_profiler, flops_profiler_section(), "per-module FLOPs profile"),
      section_key<C>("autotuning", &C::autotuning, autotuning_section(), "the autotuner"),
      section_key<C>("data_efficiency", &C::data_efficiency, data_efficiency_section(),
                     "data efficiency: the sequence-length curriculum"),
      legacy_curriculum_key(),  // after data_efficiency: it fills that
  };
  // DeepSpeed features this build does not implement. They are accepted only when switched off, so a config written
  // for DeepSpeed never silently loses a feature it asked for.
  for (const char* key : {"amp", "elasticity", "compression_training", "sparse_attention", "quantize_training",
                          "eigenvalue", "progressive_layer_drop", "hybrid_engine", "nebula", "weight_quantization",
                          "compile", "comet", "torch_autocast", "datastates_ckpt", "expert_parallel"})
    f.push_back(unsupported_key(key));
  return f;
}

Config parse_root(const Json& root) {
  Config c;
  std::set<std::string> autos;
  std::vector<std::string> warnings;
  {
    CollectWarnings collect(&warnings);
    ObjectReader r(root, "", &autos);
    config_section().read_into(r, c);
    config_section().finish(r, c);
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

const Section<Config>& config_section() {
  static const Section<Config> kSection(SectionKind::kDict, [] {
    std::vector<Field<Config>> fields = top_level_values();
    for (Field<Config>& f : top_level_sections()) fields.push_back(std::move(f));
    return fields;
  }());
  return kSection;
}

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
  // (16-bit master weights need ZeRO: the feature gate's rule, with their other conditions.)
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
  OrderedJson j = config_section().dump(*this);
  for (const std::string& path : auto_keys_) set_auto(j, path);
  return j.dump(indent);
}

}  // namespace deepspeed::config
