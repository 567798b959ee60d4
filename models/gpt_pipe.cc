#include "gpt_pipe.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <stdexcept>
#include <string>

#include "gpt_init.h"

namespace deepspeed::models {

GPTEmbeddingImpl::GPTEmbeddingImpl(const GPTConfig& cfg) : cfg_(cfg) {
  wte_ = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.hidden));
  wpe_ = register_module("wpe", torch::nn::Embedding(cfg.seq_len, cfg.hidden));
}

at::Tensor GPTEmbeddingImpl::forward(const at::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  if (t > cfg_.seq_len)
    throw std::invalid_argument("GPT: sequence of " + std::to_string(t) +
                                " tokens exceeds seq_len " + std::to_string(cfg_.seq_len));
  auto pos = at::arange(t, tokens.options().dtype(at::kLong));
  const at::Tensor tok = tp_wte_ ? tp_wte_->forward(tokens) : wte_->forward(tokens);
  return maybe_dropout(tok + wpe_->forward(pos), cfg_.dropout, is_training());
}

at::Tensor GPTEmbeddingImpl::head(const at::Tensor& x) {
  if (tp_wte_) return at::matmul(tp::copy_to_region(x, cfg_.tensor_parallel), tp_wte_->weight.t());
  return at::matmul(x, wte_->weight.t());
}

void GPTEmbeddingImpl::split(const comm::ProcessGroup& group) {
  tp_wte_ = tp::VocabParallelEmbedding(wte_->weight, group);
  replace_module("wte", tp_wte_);
  wte_ = nullptr;
}

std::vector<pipe::LayerSpec> gpt_pipeline_layers(const GPTConfig& cfg) {
  check_config(cfg);
  // The pipeline's loss is its own function of the last stage's logits (gpt_pipeline_loss_fn).
  if (cfg.tiled_loss_tokens > 0)
    throw std::invalid_argument("GPT pipeline layers: tiled_loss_tokens is not supported in a pipeline yet");
  if (cfg.tensor_parallel.is_member()) {
    const int t = cfg.tensor_parallel.size();
    if (cfg.heads % t != 0 || cfg.vocab_size % t != 0 || cfg.moe.enabled() || cfg.dropout != 0.0 ||
        cfg.sequence_parallel.is_member())
      throw std::invalid_argument("GPT pipeline layers: tensor parallelism over " + std::to_string(t) +
                                  " ranks needs heads and vocab_size divisible by it, dropout 0, no MoE and no "
                                  "sequence parallelism");
  }
  auto embedding = [cfg] {
    GPTEmbedding e(cfg);
    init_gpt_weights(*e, cfg.layers, layer_generator(cfg, 0));  // both occurrences of a tied one: layer 0's
    if (cfg.tensor_parallel.is_member()) e->split(cfg.tensor_parallel);
    return torch::nn::AnyModule(e);
  };
  std::vector<pipe::LayerSpec> layers;
  if (cfg.tied_head) {
    layers.push_back(
        pipe::TiedLayerSpec("embed", "GPTEmbedding", embedding, nullptr, {"wte.weight"}));
  } else {
    layers.emplace_back("GPTEmbedding", embedding);
  }
  for (int64_t i = 0; i < cfg.layers; ++i)
    layers.emplace_back("GPTBlock", [cfg, i] {
      GPTBlock block(cfg);
      init_gpt_weights(*block, cfg.layers, layer_generator(cfg, 1 + i));
      if (cfg.tensor_parallel.is_member()) block->split(cfg.tensor_parallel);
      return torch::nn::AnyModule(block);
    });
  // LayerNorm keeps its default weight 1, bias 0 (as GPT's ln_f).
  layers.emplace_back("LayerNorm", [cfg] {
    return torch::nn::AnyModule(torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden})));
  });
  if (cfg.tied_head) {
    layers.push_back(pipe::TiedLayerSpec("embed", "GPTEmbedding", embedding,
                                         [](torch::nn::Module& m, const at::Tensor& x) {
                                           return dynamic_cast<GPTEmbeddingImpl&>(m).head(x);
                                         },
                                         {"wte.weight"}));
  } else {
    layers.emplace_back("Linear", [cfg] {
      torch::nn::Linear head(torch::nn::LinearOptions(cfg.hidden, cfg.vocab_size).bias(false));
      init_gpt_weights(*head, cfg.layers, layer_generator(cfg, cfg.layers + 2));
      if (cfg.tensor_parallel.is_member())
        return torch::nn::AnyModule(tp::ColumnParallelLinear(head, cfg.tensor_parallel));
      return torch::nn::AnyModule(head);
    });
  }
  return layers;
}

at::Tensor gpt_pipeline_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

pipe::LossFn gpt_pipeline_loss_fn(const GPTConfig& cfg) {
  if (!cfg.tensor_parallel.is_member()) return gpt_pipeline_loss;
  const comm::ProcessGroup group = cfg.tensor_parallel;
  return [group](const at::Tensor& logits, const at::Tensor& targets) {
    return tp::vocab_parallel_cross_entropy_mean(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), group);
  };
}

}  // namespace deepspeed::models
