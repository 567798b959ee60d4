// train_llama's command line, shared by its plain and pipeline paths.
#pragma once

#include <cstdint>
#include <string>

#include "deepspeed/config.h"
#include "deepspeed/models/llama.h"

namespace examples {

struct TrainLlamaArgs {
  std::string config_path, model_dir, model_config, data_path, save_hf, save_dir, load_dir;
  std::string megatron_data_path;  // --data_path: tokenized corpora (deepspeed/data/); data_path is --data's text
  std::string sft_data_path;       // --sft_data_path: ds_preprocess --sft output
  int64_t steps = 20;
  int64_t seq_len = 128;
  int64_t seed = 1234;
  int tp_size = 1;
  int sp_size = 1;
  bool gradient_checkpointing = false;
  bool tiled_mlp_compute = false;  // ArcticTraining's name: the MLP tiled by hidden_size positions
  int64_t tiled_mlp_tokens = 0;    // an explicit tile (0: none, or hidden_size with tiled_mlp_compute)
  int64_t tiled_loss_tokens = 0;
  int pipe_stages = 0;  // 0: no pipeline
};

// The model's config from --model_dir or --model_config; refuses a vocabulary that cannot hold byte-level tokens.
deepspeed::models::LlamaConfig read_model_config(const TrainLlamaArgs& args);

// --pipe_stages: train_llama_pipe.cc.
int train_llama_pipeline(const TrainLlamaArgs& args, const deepspeed::Config& config);

}  // namespace examples
