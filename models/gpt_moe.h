// The GPT-MoE block (GPTMoEConfig in gpt.h): a pre-LayerNorm block whose MLP is a
// deepspeed::moe::MoE layer of GPT MLPs, and the expert builder that initialises each expert from
// its own seeded generator.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <optional>

#include "deepspeed/moe/layer.h"
#include "gpt.h"

namespace deepspeed::models {

// The MLP of a GPT block as a module of its own (one expert): fc (hidden -> 4 hidden), tanh-GELU,
// fc_proj.
class GPTMLPImpl : public torch::nn::Module {
 public:
  explicit GPTMLPImpl(const GPTConfig& cfg);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear fc{nullptr}, fc_proj{nullptr};
};
TORCH_MODULE(GPTMLP);

class GPTMoEBlockImpl : public torch::nn::Module {
 public:
  // `moe_block`: this block's index among the MoE blocks (picks its expert count and seeds).
  GPTMoEBlockImpl(const GPTConfig& cfg, int64_t moe_block);
  at::Tensor forward(const at::Tensor& x);
  // GPT-2's initialisation of the block's dense parameters (the experts initialise themselves when
  // built), from `generator` (default: the global one).
  void init_dense_weights(int64_t layers, std::optional<at::Generator> generator = std::nullopt);

  at::Tensor last_aux_loss;    // of the last forward
  at::Tensor last_exp_counts;  // [experts], this rank's tokens in the last forward

 private:
  double dropout_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  deepspeed::moe::MoE moe_{nullptr};
};
TORCH_MODULE(GPTMoEBlock);

}  // namespace deepspeed::models
