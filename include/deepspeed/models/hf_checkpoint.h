// Hugging Face model folders: the weights of config.json's model in safetensors, one file (model.safetensors) or
// shards named by model.safetensors.index.json, read and written as transformers does.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
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
struct HfLoadOptions {
  // The folder's name of each of the model's parameter names (as they are when empty), e.g. llama_pipeline_hf_name.
  std::function<std::string(const std::string&)> hf_name;
  // The module holds part of the folder's model (a pipeline stage): the folder's other tensors are skipped, not
  // refused.
  bool part_of_model = false;
};
void load_hf_weights(torch::nn::Module& model, const std::string& dir, const HfLoadOptions& options = {});

// The fp32 weights of a ZeRO training checkpoint (<dir>/<tag>, tag empty: `latest`; the partitions of every
// data-parallel rank, as the engine's save_checkpoint wrote them, or Python DeepSpeed's), straight into `model` by
// parameter name: one parameter assembled at a time from the mapped rank files (never the whole model), cast to the
// parameter's dtype, a tensor-parallel layer taking only this rank's slice. Every name and shape is checked before
// the first copy: a checkpoint of another model throws checkpoint::CheckpointError naming the parameter and leaves
// the model as it was. Not with ZeRO-3 units (load those through the engine). Not collective.
void load_fp32_checkpoint(torch::nn::Module& model, const std::string& dir, const std::string& tag = "");

// The model's parameters whole, by name, as CPU tensors (in `dtype` when given), for save_hf_folder: ZeRO-3
// partitions gathered one parameter at a time, tensor-parallel slices joined from their group. Collective: every rank
// calls it and every rank gets the whole weights.
// `hf_name` renames as HfLoadOptions::hf_name does; a name it maps to "" is left out.
std::vector<std::pair<std::string, at::Tensor>> gather_hf_weights(
    torch::nn::Module& model, std::optional<at::ScalarType> dtype = std::nullopt,
    const std::function<std::string(const std::string&)>& hf_name = nullptr);

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

// A folder written by several processes (a pipeline's stages): each writes shard `index` of `count` with its own
// weights (model-0000<index+1>-of-0000<count>.safetensors; model.safetensors when count is 1), then, once every
// shard is written, one process writes model.safetensors.index.json (from the shards' headers) and config.json and
// removes stale weight files. A name in two shards is refused.
void write_hf_shard(const std::string& dir, const std::vector<std::pair<std::string, at::Tensor>>& weights, int index,
                    int count, std::optional<at::ScalarType> dtype = std::nullopt);
void write_hf_index(const std::string& dir, int count, const std::string& config_json);

}  // namespace deepspeed::models
