// autotuning: parse, validate and dump (DeepSpeed's autotuning/config.py and constants.py).
#include "config/sections.h"

namespace deepspeed::config {

namespace {

const Section<ModelInfoConfig>& model_info_section() {
  using C = ModelInfoConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          bool_key<C>("profile", &C::profile, "the trial only measures the model and exits"),
          optional_int_key<C, int64_t>("num_params", &C::num_params, 1, "parameters, when not measured"),
          optional_int_key<C, int64_t>("hidden_size", &C::hidden_size, 1, "hidden size, when not measured"),
          optional_int_key<C, int64_t>("num_layers", &C::num_layers, 1, "layers, when not measured"),
      });
  return kSection;
}

void check_autotuning(ObjectReader& r, AutotuningConfig& c) {
  if (c.results_dir.empty()) fail_at(r.path_of("results_dir"), "must not be empty");
  if (c.exps_dir.empty()) fail_at(r.path_of("exps_dir"), "must not be empty");
  if (c.end_profile_step <= c.start_profile_step) {
    fail_at(r.path_of("end_profile_step"), "must be greater than start_profile_step (" +
                                               std::to_string(c.start_profile_step) + "), got " +
                                               std::to_string(c.end_profile_step));
  }
  if (c.max_train_micro_batch_size_per_gpu < c.min_train_micro_batch_size_per_gpu) {
    fail_at(r.path_of("max_train_micro_batch_size_per_gpu"),
            "must be >= min_train_micro_batch_size_per_gpu (" +
                std::to_string(c.min_train_micro_batch_size_per_gpu) + "), got " +
                std::to_string(c.max_train_micro_batch_size_per_gpu));
  }
}

Field<AutotuningConfig> arg_mappings_key() {
  using C = AutotuningConfig;
  return custom_key<C>(
      "arg_mappings", "object of strings", "config keys to the training program's flags",
      [](ObjectReader& r, const std::string& key, C& c) {
        const Json* mappings = r.find(key);
        if (!mappings || mappings->is_null()) return;
        const std::string path = r.path_of(key);
        if (!mappings->is_object()) fail_at(path, "expected an object, got " + describe(*mappings));
        std::map<std::string, std::string> m;
        for (auto it = mappings->begin(); it != mappings->end(); ++it) {
          if (!it.value().is_string()) {
            fail_at(join_path(path, it.key()), "expected a string, got " + describe(it.value()));
          }
          m[it.key()] = it.value().get<std::string>();
        }
        c.arg_mappings = std::move(m);
      },
      [](const C& c) { return std::optional<OrderedJson>(optional_json(c.arg_mappings)); });
}

}  // namespace

const Section<AutotuningConfig>& autotuning_section() {
  using C = AutotuningConfig;
  static const Section<C> kSection(
      SectionKind::kDict,
      {
          bool_key<C>("enabled", &C::enabled, "run the autotuner (deepspeed --autotuning)"),
          bool_key<C>("fast", &C::fast, "tune the micro-batch size only at the best ZeRO stage"),
          string_key<C>("results_dir", &C::results_dir, "where the summary and best config go"),
          string_key<C>("exps_dir", &C::exps_dir, "where each trial's config and log go"),
          bool_key<C>("overwrite", &C::overwrite, "overwrite earlier results"),
          choice_key<C>("metric", &C::metric, {"latency", "throughput", "flops"}, "what a trial is ranked by",
                        /*case_insensitive=*/true),
          int_key<C, int>("start_profile_step", &C::start_profile_step, 0, "first measured step of a trial"),
          int_key<C, int>("end_profile_step", &C::end_profile_step, 0, "step after which a trial stops"),
          optional_string_key<C>("metric_path", &C::metric_path, "where a trial writes its metric"),
          choice_key<C>("tuner_type", &C::tuner_type, {"gridsearch", "random", "model_based"},
                        "how the next trial is chosen"),
          int_key<C, int>("tuner_early_stopping", &C::tuner_early_stopping, 1,
                          "stop after N trials without improvement"),
          int_key<C, int>("tuner_num_trials", &C::tuner_num_trials, 1, "trials at most"),
          arg_mappings_key(),
          with_keys_of(custom_key<C>(
                           "model_info", "section", "the model's size, measured or given",
                           [](ObjectReader& r, const std::string& key, C& c) {
                             const Json* v = r.find(key);
                             if (v && !v->is_null())
                               c.model_info = model_info_section().parse(*v, r.path_of(key), nullptr);
                           },
                           [](const C& c) {
                             return std::optional<OrderedJson>(c.model_info ? model_info_section().dump(*c.model_info)
                                                                            : OrderedJson(nullptr));
                           }),
                       model_info_section()),
          optional_string_key<C>("model_info_path", &C::model_info_path, "where the profiling trial writes it"),
          int_key<C, int>("mp_size", &C::mp_size, 1, "model-parallel size, for the memory estimate"),
          optional_int_key<C, int64_t>("max_train_batch_size", &C::max_train_batch_size, 1,
                                       "largest global batch tried"),
          int_key<C, int64_t>("min_train_batch_size", &C::min_train_batch_size, 1, "smallest global batch tried"),
          int_key<C, int64_t>("max_train_micro_batch_size_per_gpu", &C::max_train_micro_batch_size_per_gpu, 1,
                              "largest micro-batch tried"),
          int_key<C, int64_t>("min_train_micro_batch_size_per_gpu", &C::min_train_micro_batch_size_per_gpu, 1,
                              "smallest micro-batch tried"),
          int_key<C, int>("num_tuning_micro_batch_sizes", &C::num_tuning_micro_batch_sizes, 1,
                          "micro-batch sizes tried per stage"),
      },
      check_autotuning);
  return kSection;
}

}  // namespace deepspeed::config
