// deepspeed::init_inference: a Llama-family model (deepspeed/models/llama.h) made ready to generate, as DeepSpeed's
// deepspeed.init_inference(model, config) is for a transformers model: cast to the config's dtype, on the
// accelerator, in evaluation mode, split by tensor parallelism over tensor_parallel.tp_size ranks (each rank holding
// and loading only its slices), generating with a KV cache bounded by max_out_tokens.
//
//   auto engine = deepspeed::init_inference("Llama-3.2-1B", InferenceConfig::from_file("ds_inference.json"));
//   auto out = engine.generate({prompt_ids}, GenerationConfig::from_file("Llama-3.2-1B/generation_config.json"));
//
// With tp_size > 1 every rank of the job runs the same calls (the launcher starts them; tp_size must divide the
// world, consecutive ranks form a group) and gets the same tokens.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "deepspeed/inference/generate.h"
#include "deepspeed/inference/generation_config.h"
#include "deepspeed/inference/inference_config.h"
#include "deepspeed/models/llama.h"

namespace deepspeed {

namespace inference {

class InferenceEngine {
 public:
  InferenceEngine(models::LlamaForCausalLM model, InferenceConfig config);
  // Each prompt's new tokens (generate.h); ConfigError when the longest prompt plus the token limit exceeds
  // max_out_tokens.
  GenerateResult generate(const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& cfg);
  models::LlamaForCausalLM module() const { return model_; }
  const InferenceConfig& config() const { return config_; }

 private:
  models::LlamaForCausalLM model_;
  InferenceConfig config_;
};

}  // namespace inference

// A model the caller built (under tensor parallelism: over deepspeed::tp::tensor_parallel_groups(tp_size), with its
// weights loaded): ConfigError when its tensor-parallel group is not tp_size ranks.
inference::InferenceEngine init_inference(models::LlamaForCausalLM model, const inference::InferenceConfig& config);
// Builds the model from a Hugging Face folder (config.json and safetensors) and loads it, each rank reading only its
// slices under tensor parallelism (initialising the process group from the launcher's environment when needed).
// `checkpoint_dir` set: the weights come from that ZeRO training checkpoint instead (its latest tag; the fp32
// partitions of every rank, one parameter at a time: models::load_fp32_checkpoint), the folder giving config.json.
inference::InferenceEngine init_inference(const std::string& model_dir, const inference::InferenceConfig& config,
                                          const std::string& checkpoint_dir = "");

}  // namespace deepspeed
