// autotuning: parse, validate and dump (DeepSpeed's autotuning/config.py and constants.py).
#include "config/sections.h"

namespace deepspeed::config {

namespace {

ModelInfoConfig parse_model_info(const Json& node) {
  ObjectReader r(node, "autotuning.model_info", nullptr);
  ModelInfoConfig c;
  r.read_bool("profile", &c.profile);
  r.read_optional_int("num_params", &c.num_params, 1);
  r.read_optional_int("hidden_size", &c.hidden_size, 1);
  r.read_optional_int("num_layers", &c.num_layers, 1);
  r.finish_ignoring_unknown();
  return c;
}

}  // namespace

AutotuningConfig parse_autotuning_config(const Json& node) {
  ObjectReader r(node, "autotuning", nullptr);
  AutotuningConfig c;
  r.read_bool("enabled", &c.enabled);
  r.read_bool("fast", &c.fast);
  r.read_string("results_dir", &c.results_dir);
  if (c.results_dir.empty()) fail_at(r.path_of("results_dir"), "must not be empty");
  r.read_string("exps_dir", &c.exps_dir);
  if (c.exps_dir.empty()) fail_at(r.path_of("exps_dir"), "must not be empty");
  r.read_bool("overwrite", &c.overwrite);
  r.read_choice("metric", &c.metric, {"latency", "throughput", "flops"}, true);
  r.read_int("start_profile_step", &c.start_profile_step, 0);
  r.read_int("end_profile_step", &c.end_profile_step, 0);
  if (c.end_profile_step <= c.start_profile_step) {
    fail_at(r.path_of("end_profile_step"), "must be greater than start_profile_step (" +
                                               std::to_string(c.start_profile_step) + "), got " +
                                               std::to_string(c.end_profile_step));
  }
  r.read_optional_string("metric_path", &c.metric_path);
  r.read_choice("tuner_type", &c.tuner_type, {"gridsearch", "random", "model_based"});
  r.read_int("tuner_early_stopping", &c.tuner_early_stopping, 1);
  r.read_int("tuner_num_trials", &c.tuner_num_trials, 1);

  const Json* mappings = r.find("arg_mappings");
  if (mappings && !mappings->is_null()) {
    const std::string path = r.path_of("arg_mappings");
    if (!mappings->is_object()) fail_at(path, "expected an object, got " + describe(*mappings));
    std::map<std::string, std::string> m;
    for (auto it = mappings->begin(); it != mappings->end(); ++it) {
      if (!it.value().is_string()) {
        fail_at(join_path(path, it.key()), "expected a string, got " + describe(it.value()));
      }
      m[it.key()] = it.value().get<std::string>();
    }
    c.arg_mappings = std::move(m);
  }
  const Json* model_info = r.find("model_info");
  if (model_info && !model_info->is_null()) c.model_info = parse_model_info(*model_info);
  r.read_optional_string("model_info_path", &c.model_info_path);
  r.read_int("mp_size", &c.mp_size, 1);
  r.read_optional_int("max_train_batch_size", &c.max_train_batch_size, 1);
  r.read_int("min_train_batch_size", &c.min_train_batch_size, 1);
  r.read_int("max_train_micro_batch_size_per_gpu", &c.max_train_micro_batch_size_per_gpu, 1);
  r.read_int("min_train_micro_batch_size_per_gpu", &c.min_train_micro_batch_size_per_gpu, 1);
  r.read_int("num_tuning_micro_batch_sizes", &c.num_tuning_micro_batch_sizes, 1);
  r.finish_ignoring_unknown();
  if (c.max_train_micro_batch_size_per_gpu < c.min_train_micro_batch_size_per_gpu) {
    fail_at(r.path_of("max_train_micro_batch_size_per_gpu"),
            "must be >= min_train_micro_batch_size_per_gpu (" +
                std::to_string(c.min_train_micro_batch_size_per_gpu) + "), got " +
                std::to_string(c.max_train_micro_batch_size_per_gpu));
  }
  return c;
}

OrderedJson dump_autotuning_config(const AutotuningConfig& c) {
  OrderedJson j;
  j["enabled"] = c.enabled;
  j["fast"] = c.fast;
  j["results_dir"] = c.results_dir;
  j["exps_dir"] = c.exps_dir;
  j["overwrite"] = c.overwrite;
  j["metric"] = c.metric;
  j["start_profile_step"] = c.start_profile_step;
  j["end_profile_step"] = c.end_profile_step;
  j["metric_path"] = optional_json(c.metric_path);
  j["tuner_type"] = c.tuner_type;
  j["tuner_early_stopping"] = c.tuner_early_stopping;
  j["tuner_num_trials"] = c.tuner_num_trials;
  j["arg_mappings"] = optional_json(c.arg_mappings);
  if (c.model_info) {
    j["model_info"] = OrderedJson{{"profile", c.model_info->profile},
                                  {"num_params", optional_json(c.model_info->num_params)},
                                  {"hidden_size", optional_json(c.model_info->hidden_size)},
                                  {"num_layers", optional_json(c.model_info->num_layers)}};
  } else {
    j["model_info"] = nullptr;
  }
  j["model_info_path"] = optional_json(c.model_info_path);
  j["mp_size"] = c.mp_size;
  j["max_train_batch_size"] = optional_json(c.max_train_batch_size);
  j["min_train_batch_size"] = c.min_train_batch_size;
  j["max_train_micro_batch_size_per_gpu"] = c.max_train_micro_batch_size_per_gpu;
  j["min_train_micro_batch_size_per_gpu"] = c.min_train_micro_batch_size_per_gpu;
  j["num_tuning_micro_batch_sizes"] = c.num_tuning_micro_batch_sizes;
  return j;
}

}  // namespace deepspeed::config
