// train_gpt's command line and the pieces its plain and pipeline training loops share.
#pragma once

#include <cstdint>
#include <string>

#include "deepspeed/config.h"
#include "gpt.h"

namespace examples {

struct TrainGptArgs {
  std::string config_path;
  std::string data_path;
  int64_t steps = 100;
  std::string save_dir;
  int64_t save_interval = 0;  // 0: only after the last step
  std::string load_dir;
  int64_t seed = 1234;
  deepspeed::models::GPTConfig model;
  bool untied_head = false;
  int pipe_stages = 0;  // 0: no pipeline
};

// Rank 0 prints the summary line scripts compare runs by (collective: the peak memory is the largest rank's):
//   final step=<N> loss=<float> params_l2=<sqrt(params_sq)> tokens_per_s=<tokens/seconds> peak_rss_mb=<float>
void print_final(int64_t step, double loss, double params_sq, double tokens, double seconds);

// --pipe_stages: train_gpt_pipe.cc.
int train_pipeline(const TrainGptArgs& args, const deepspeed::Config& config);

}  // namespace examples
