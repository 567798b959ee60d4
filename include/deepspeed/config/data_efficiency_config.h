// DeepSpeed's data efficiency section (`data_efficiency`, deepspeed/runtime/data_pipeline/config.py): of it, this
// build implements curriculum learning on the sequence length (the "seqlen" metric, one cluster, difficulty by
// value, with DeepSpeed's fixed_linear, fixed_root and fixed_discrete schedules), which the data path applies
// (deepspeed/data/curriculum.h). Other metrics (they need the data analyzer's index files), the custom schedule,
// dynamic batching and data routing (random-LTD) are refused by key. Before DeepSpeed 0.19.8 the same curriculum
// was the top-level `curriculum_learning` section with "curriculum_type": "seqlen"; that form is read into this one
// (with a warning), and a dump writes this one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::config {

// One curriculum metric: DeepSpeed's CurriculumScheduler config (data_pipeline/curriculum_scheduler.py) and how the
// metric's samples are clustered.
struct CurriculumMetricConfig {
  std::optional<int64_t> min_difficulty;  // required when enabled
  std::optional<int64_t> max_difficulty;  // required when enabled
  std::string schedule_type;              // fixed_linear, fixed_root, fixed_discrete
  // schedule_config:
  std::optional<int64_t> total_curriculum_step;  // fixed_linear, fixed_root: steps from min to max
  std::optional<int64_t> difficulty_step;        // fixed_linear, fixed_root: difficulties are multiples of it
  std::optional<double> root_degree;             // fixed_root
  std::vector<int64_t> difficulty;               // fixed_discrete: one more than max_step
  std::vector<int64_t> max_step;                 // fixed_discrete: the last step of each difficulty but the last
  std::string difficulty_type = "value";         // only "value" for seqlen
  std::string clustering_type = "single_cluster";
  std::optional<std::string> index_to_sample_path;  // the data analyzer's files: unused by seqlen
  std::optional<std::string> index_to_metric_path;
};

struct CurriculumLearningConfig {
  bool enabled = false;
  std::optional<std::string> data_cluster_path;  // where DeepSpeed's sampler writes clusters: unused here
  std::map<std::string, CurriculumMetricConfig> curriculum_metrics;
};

struct DataSamplingConfig {
  bool enabled = false;
  int64_t num_epochs = 1000;
  int num_workers = 0;
  bool pin_memory = false;
  CurriculumLearningConfig curriculum_learning;
};

struct DataEfficiencyConfig {
  bool enabled = false;
  int64_t seed = 1234;
  DataSamplingConfig data_sampling;

  // The sequence-length curriculum when curriculum learning is enabled (validated), else null.
  const CurriculumMetricConfig* seqlen_curriculum() const {
    const auto& c = data_sampling.curriculum_learning;
    const auto it = c.curriculum_metrics.find("seqlen");
    return c.enabled && it != c.curriculum_metrics.end() ? &it->second : nullptr;
  }
};

}  // namespace deepspeed::config
