// init_inference and InferenceEngine (deepspeed/inference/engine.h).
#include "deepspeed/inference/engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/tp/groups.h"

namespace deepspeed {

namespace inference {

InferenceEngine::InferenceEngine(models::LlamaForCausalLM model, InferenceConfig config)
    : model_(std::move(model)), config_(config) {
  const auto& group = model_->config().tensor_parallel;
  const int model_tp = group.is_member() ? group.size() : 1;
  DS_CHECK_T(ConfigError, model_tp == config_.tp_size, "init_inference: tensor_parallel.tp_size is ", config_.tp_size,
             " but the model is split over ", model_tp,
             " ranks (build it over deepspeed::tp::tensor_parallel_groups(tp_size))");
  model_->to(accelerator::get_accelerator().device(), config_.dtype);
  model_->eval();
  // DeepSpeed's kernel injection, here: q/k/v and gate/up as one matmul each (the weights share their storage), and
  // on a CPU the linear weights packed for oneDNN.
  if (config_.replace_with_kernel_inject) model_->inject_kernels();
}

GenerateResult InferenceEngine::generate(const std::vector<std::vector<int64_t>>& prompts,
                                         const GenerationConfig& cfg) {
  const int64_t total = positions_needed(prompts, cfg);
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  DS_CHECK_T(ConfigError, total <= config_.max_out_tokens, "init_inference: a prompt of ", longest,
             " tokens plus up to ", total - static_cast<int64_t>(longest), " new ones exceeds max_out_tokens ",
             config_.max_out_tokens, " (raise it in the inference config, or lower max_new_tokens)");
  return inference::generate(*model_, prompts, cfg);
}

}  // namespace inference

inference::InferenceEngine init_inference(models::LlamaForCausalLM model, const inference::InferenceConfig& config) {
  return inference::InferenceEngine(std::move(model), config);
}

inference::InferenceEngine init_inference(const std::string& model_dir, const inference::InferenceConfig& config,
                                          const std::string& checkpoint_dir) {
  models::LlamaConfig cfg = models::LlamaConfig::from_file(model_dir + "/config.json");
  if (config.tp_size > 1) {
    if (!comm::is_initialized()) comm::init_distributed();
    DS_CHECK_T(ConfigError, comm::get_world_size() % config.tp_size == 0, "init_inference: tensor_parallel.tp_size ",
               config.tp_size, " must divide the world of ", comm::get_world_size(), " ranks");
    cfg.tensor_parallel = tp::tensor_parallel_groups(config.tp_size).tensor_parallel;
  }
  models::LlamaForCausalLM model(cfg);
  if (checkpoint_dir.empty())
    models::load_hf_weights(*model, model_dir);
  else
    models::load_fp32_checkpoint(*model, checkpoint_dir);
  return inference::InferenceEngine(std::move(model), config);
}

}  // namespace deepspeed
