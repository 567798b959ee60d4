// The two kinds of file one save writes, in our layout (include/deepspeed/checkpoint.h), built from what the engine
// hands over: each rank's zero_pp_rank_<r>_mp_rank_XX_optim_states.pt (its fp32 master partition, the optimizer's
// states at the same offsets and `param_slices` saying which elements of which parameter sit where) and rank 0's
// mp_rank_XX_model_states.pt (the module in the model's dtype, buffers, counters, the sections other components own,
// config, client state). Loading (load_plan.h) matches parameters by name, which is what makes any world size and
// stage loadable into any other.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/config.h"
#include "zero/partition.h"

namespace deepspeed::checkpoint {

struct RankFileContents {
  const Config* config = nullptr;  // the engine's (its ZeRO stage)
  int rank = 0;
  int world_size = 1;
  std::vector<at::Tensor> masters;              // this rank's fp32 masters, per group
  std::vector<std::vector<at::Tensor>> states;  // the optimizer's, [group][k]
  // Per group: this rank holds the first copy of it. At stage 0, where every rank holds every master, only that rank
  // writes the group (the others an empty partition); at stages 1-3 every rank writes its partition.
  std::vector<bool> first_copy;
  std::vector<zero::MasterFragment> fragments;
  std::vector<std::vector<std::string>> names;  // by (group, index)
  struct Optimizer {
    std::string type;
    int64_t step = 0;
    std::vector<std::string> state_names;
    std::vector<double> lrs;  // per group
    std::vector<std::optional<double>> momenta, weight_decays;
    std::string archive;  // a client optimizer's bytes; written when not empty (at stage 0 by rank 0 only)
  };
  std::optional<Optimizer> optimizer;
  at::Tensor rng;  // this rank's RNG state
};

StateDict rank_file(const std::string& run_id, const RankFileContents& contents);

struct ModelFileContents {
  const Config* config = nullptr;  // the engine's (its ZeRO stage)
  std::string config_json;         // saved as ds_config
  StateDict params = make_state_dict();  // the module's parameters by name (none: they live in the rank files only)
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  std::vector<std::vector<std::string>> names;  // by (group, index), with their whole shapes
  std::vector<std::vector<std::vector<int64_t>>> shapes;
  int64_t global_steps = 0, global_samples = 0, train_batch_size = 0, micro_steps = 0, skipped_steps = 0;
  int64_t dp_world_size = 1;
  // DeepSpeed's model-parallel size is the tensor-parallel one (a pipeline's stages are not counted); the layout
  // (parameter name -> split dimension, fused blocks) lets a universal conversion merge the tensor ranks' slices.
  int64_t tensor_parallel_size = 1;
  std::map<std::string, std::pair<int64_t, int64_t>> tensor_parallel_layout;
  std::string dtype;  // "fp32", "bf16" or "fp16"
  std::vector<std::pair<std::string, c10::IValue>> sections;  // the loss scaler's, the schedule's, ...
  StateDict client_state = make_state_dict();
};

StateDict model_file(const std::string& run_id, const ModelFileContents& contents);

}  // namespace deepspeed::checkpoint
