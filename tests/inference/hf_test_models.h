// The inference tests' access to tests/models' tiny Hugging Face folders (DS_HF_MODELS): the rank count of the run
// (initialising the process group when the launcher started it) and a folder's model loaded, split over every rank
// by tensor parallelism when there are several.
#pragma once

#include <cstdlib>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/tp/groups.h"

namespace hf_test_models {

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

inline int world() {
  if (!env("WORLD_SIZE").empty() && !deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  return deepspeed::comm::is_initialized() ? deepspeed::comm::get_world_size() : 1;
}

// DS_HF_MODELS/<name>, in evaluation mode.
inline deepspeed::models::LlamaForCausalLM load(const std::string& name) {
  namespace dm = deepspeed::models;
  const std::string dir = env("DS_HF_MODELS") + "/" + name;
  dm::LlamaConfig cfg = dm::LlamaConfig::from_file(dir + "/config.json");
  if (world() > 1) cfg.tensor_parallel = deepspeed::tp::tensor_parallel_groups(world()).tensor_parallel;
  dm::LlamaForCausalLM model(cfg);
  dm::load_hf_weights(*model, dir);
  model->eval();
  return model;
}

}  // namespace hf_test_models
