#include "gpt_moe.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "gpt_init.h"

namespace deepspeed::models {
namespace {

// Builds one expert (or the residual MLP) without touching the global generator, and initialises it
// from a generator seeded by (seed, block, expert): the experts are then the same whichever ranks
// build them, and the dense parameters draw the same numbers whatever number of experts this rank
// builds.
moe::ExpertBuilder expert_builder(const GPTConfig& cfg, int64_t moe_block) {
  return [cfg, moe_block](int64_t expert_id) {
    at::Generator global = at::detail::getDefaultCPUGenerator();
    at::Tensor saved;
    {
      std::lock_guard<std::mutex> lock(global.mutex());
      saved = global.get_state();
    }
    GPTMLP mlp(cfg);
    {
      std::lock_guard<std::mutex> lock(global.mutex());
      global.set_state(saved);
    }
    const uint64_t seed = cfg.moe.seed + 1000003ULL * static_cast<uint64_t>(moe_block + 1) +
                          static_cast<uint64_t>(expert_id);
    init_gpt_weights(*mlp, cfg.layers, at::detail::createCPUGenerator(seed));
    return torch::nn::AnyModule(mlp);
  };
}

moe::MoEOptions moe_options(const GPTConfig& cfg, int64_t moe_block) {
  moe::MoEOptions o;
  o.hidden_size = cfg.hidden;
  o.num_experts = cfg.experts_of(moe_block);
  o.ep_size = cfg.moe.ep_size;
  o.k = cfg.moe.top_k;
  o.capacity_factor = cfg.moe.capacity_factor;
  o.eval_capacity_factor = cfg.moe.eval_capacity_factor;
  o.min_capacity = cfg.moe.min_capacity;
  o.use_residual = cfg.moe.use_residual;
  o.noisy_gate_policy = moe::parse_noisy_gate_policy(cfg.moe.noisy_gate_policy);
  o.drop_tokens = cfg.moe.drop_tokens;
  o.use_rts = cfg.moe.use_rts;
  o.top2_2nd_expert_sampling = cfg.moe.top2_2nd_expert_sampling;
  return o;
}

}  // namespace

GPTMLPImpl::GPTMLPImpl(const GPTConfig& cfg) {
  fc = register_module(
      "fc", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden, 4 * cfg.hidden).bias(cfg.bias)));
  fc_proj = register_module(
      "fc_proj",
      torch::nn::Linear(torch::nn::LinearOptions(4 * cfg.hidden, cfg.hidden).bias(cfg.bias)));
}

at::Tensor GPTMLPImpl::forward(const at::Tensor& x) {
  return fc_proj->forward(at::gelu(fc->forward(x), "tanh"));
}

GPTMoEBlockImpl::GPTMoEBlockImpl(const GPTConfig& cfg, int64_t moe_block) : dropout_(cfg.dropout) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden})));
  attn_ = register_module("attn", CausalSelfAttention(cfg));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden})));
  moe_ =
      register_module("moe", moe::MoE(moe_options(cfg, moe_block), expert_builder(cfg, moe_block)));
}

void GPTMoEBlockImpl::init_dense_weights(int64_t layers, std::optional<at::Generator> generator) {
  init_gpt_weights(*attn_, layers, generator);
  init_gpt_weights(*moe_->deepspeed_moe->gate, layers, generator);
  if (moe_->coefficient) init_gpt_weights(*moe_->coefficient, layers, generator);
}

at::Tensor GPTMoEBlockImpl::forward(const at::Tensor& x) {
  auto h = x + attn_->forward(ln1_->forward(x));
  moe::MoE::Impl::Output out = moe_->forward(ln2_->forward(h));
  last_aux_loss = out.l_aux;
  last_exp_counts = out.exp_counts;
  return h + maybe_dropout(out.output, dropout_, is_training());
}

}  // namespace deepspeed::models
