// The `autotuning` section: what the autotuner searches, how it scores trials and where it writes
// results. Defaults equal DeepSpeed's autotuning/constants.py.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace deepspeed::config {

struct ModelInfoConfig {
  bool profile = false;
  std::optional<int64_t> num_params;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> num_layers;
};

struct AutotuningConfig {
  bool enabled = false;
  bool fast = true;
  std::string results_dir = "autotuning_results";
  std::string exps_dir = "autotuning_exps";
  bool overwrite = true;
  std::string metric = "throughput";  // latency | throughput | flops
  int start_profile_step = 3;
  int end_profile_step = 5;
  std::optional<std::string> metric_path;
  std::string tuner_type = "gridsearch";  // gridsearch | random | model_based
  int tuner_early_stopping = 5;
  int tuner_num_trials = 50;
  std::optional<std::map<std::string, std::string>> arg_mappings;
  std::optional<ModelInfoConfig> model_info;
  std::optional<std::string> model_info_path;
  int mp_size = 1;
  std::optional<int64_t> max_train_batch_size;
  int64_t min_train_batch_size = 1;
  int64_t max_train_micro_batch_size_per_gpu = 1024;
  int64_t min_train_micro_batch_size_per_gpu = 1;
  int num_tuning_micro_batch_sizes = 3;
};

}  // namespace deepspeed::config
