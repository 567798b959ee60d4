// Hugging Face model folders: the weights of config.json's model in safetensors, one file (model.safetensors) or
// shards named by model.safetensors.index.json, read and written as transformers does.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace deepspeed::models {

// Copies the folder's tensors into `model`'s parameters and buffers, matched by name, converting each to the
// parameter's dtype and device. The files are memory-mapped and every check runs before the first copy: a missing,
// extra or mis-shaped tensor, a truncated file or a header that does not fit its file throws
// checkpoint::CheckpointError naming the file and tensor, and leaves the model as it was. Tensors transformers
// itself drops are skipped: rotary inv_freq buffers of old checkpoints, and lm_head.weight beside a tied embedding.
// A model built inside a zero::Init scope (ZeRO stage 3) keeps its units partitioned: each rank reads and writes only
// its own partition of each unit, so no rank holds the whole model; a tensor-parallel layer takes only this rank's
// slice. Not collective.
void load_hf_weights(torch::nn::Module& model, const std::string& dir);

// The model's parameters whole, by name, as CPU tensors (in `dtype` when given), for save_hf_folder: ZeRO-3
// partitions gathered one parameter at a time, tensor-parallel slices joined from their group. Collective: every rank
// calls it and every rank gets the whole weights.
std::vector<std::pair<std::string, at::Tensor>> gather_hf_weights(torch::nn::Module& model,
                                                                  std::optional<at::ScalarType> dtype = std::nullopt);

struct HfSaveOptions {
  // A folder whose weights exceed this is written as model-0000i-of-0000N.safetensors shards with
  // model.safetensors.index.json (transformers' save_pretrained default).
  int64_t max_shard_bytes = int64_t{5} << 30;
  std::optional<at::ScalarType> dtype;  // the tensors' dtype on disk; default: as they are
};

// Writes `weights` (name, tensor; on any device) and `config_json` (its dtype set to the weights') as an HF folder
// transformers' from_pretrained loads. Each file is written crash-safely; stale weight files of an earlier save with
// another sharding are removed.
void save_hf_folder(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& weights,
                    const std::string& config_json, const HfSaveOptions& options = {});

}  // namespace deepspeed::models
