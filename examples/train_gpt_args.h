// train_gpt's command line and the pieces its plain and pipeline training loops share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "deepspeed/checkpoint.h"
#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"
#include "final_line.h"
#include "gpt.h"

namespace examples {

struct TrainGptArgs {
  std::string config_path;
  std::string data_path;           // --data: byte-level text
  std::string megatron_data_path;  // --data_path: tokenized corpora (deepspeed/data/)
  int64_t steps = 100;
  std::string save_dir;
  int64_t save_interval = 0;  // 0: only after the last step
  std::string load_dir;
  int64_t seed = 1234;
  deepspeed::models::GPTConfig model;
  bool untied_head = false;
  int pipe_stages = 0;  // 0: no pipeline
  int tp_size = 1;      // tensor-parallel ranks per model replica
  int sp_size = 1;      // sequence-parallel ranks per sample (Ulysses)
};

// --load_dir: the global step the run continues from. Checks that a checkpoint was loaded and that its data
// position (client_state "data_step", written by data_position) is that step; rank 0 says where it resumed.
int64_t resumed_step(const std::optional<deepspeed::LoadCheckpointResult>& loaded, int64_t global_steps,
                     const std::string& load_dir);
// The client state every save records: the data position (the number of finished global steps).
deepspeed::checkpoint::StateDict data_position(int64_t done);
// True when --save_dir is set and finishing step `done` (1-based) is a save point: every --save_interval steps
// and after the last step.
bool is_save_point(const TrainGptArgs& args, int64_t done);

// --pipe_stages: train_gpt_pipe.cc.
int train_pipeline(const TrainGptArgs& args, const deepspeed::Config& config);

}  // namespace examples
