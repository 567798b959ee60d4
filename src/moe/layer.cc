// The MoE layer (include/deepspeed/moe/layer.h): gate, dispatch, experts across the expert-parallel
// group, combine, and the residual mix.
#include "deepspeed/moe/layer.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>

#include <limits>

#include "deepspeed/error.h"
#include "moe/all_to_all.h"

namespace deepspeed::moe {

GateOptions MoEOptions::gate_options() const {
  GateOptions g;
  g.num_experts = num_experts;
  g.k = k;
  g.capacity_factor = capacity_factor;
  g.eval_capacity_factor = eval_capacity_factor;
  g.min_capacity = min_capacity;
  g.noisy_gate_policy = noisy_gate_policy;
  g.drop_tokens = drop_tokens;
  g.use_rts = use_rts;
  g.top2_2nd_expert_sampling = top2_2nd_expert_sampling;
  return g;
}

TopKGateImpl::TopKGateImpl(int64_t hidden_size, GateOptions options) : options_(options) {
  check_gate_options(options_);
  DS_CHECK_T(ConfigError, hidden_size >= 1, "moe: hidden_size must be >= 1, got ", hidden_size);
  wg = register_module(
      "wg",
      torch::nn::Linear(torch::nn::LinearOptions(hidden_size, options_.num_experts).bias(false)));
}

Routing TopKGateImpl::forward(const at::Tensor& x, const comm::ProcessGroup& capacity_group) {
  // Routing decisions are made in fp32 whatever the model's dtype, as DeepSpeed's gate does.
  at::Tensor input = x.to(at::kFloat);
  if (options_.noisy_gate_policy == NoisyGatePolicy::kJitter && is_training()) {
    constexpr double kEps = 1e-2;
    input = input * at::empty_like(input).uniform_(1.0 - kEps, 1.0 + kEps);
  }
  at::Tensor logits = at::linear(input, wg->weight.to(at::kFloat));
  return top_k_gating(logits, options_, is_training(), capacity_group);
}

ExpertsImpl::ExpertsImpl(const ExpertBuilder& build, int64_t num_experts, int ep_size, int ep_rank)
    : ep_size_(ep_size) {
  DS_CHECK(static_cast<bool>(build), "moe: the expert builder is empty");
  const int64_t local = num_experts / ep_size;
  first_expert_ = local * ep_rank;
  deepspeed_experts = register_module("deepspeed_experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < local; ++e) {
    torch::nn::AnyModule expert = build(first_expert_ + e);
    DS_CHECK(!expert.is_empty(), "moe: the expert builder returned an empty module for expert ",
             first_expert_ + e);
    deepspeed_experts->push_back(expert.ptr());
    modules_.push_back(std::move(expert));
  }
}

at::Tensor ExpertsImpl::forward(const at::Tensor& x) {
  std::vector<at::Tensor> outs;
  outs.reserve(modules_.size());
  for (size_t e = 0; e < modules_.size(); ++e)
    outs.push_back(modules_[e].forward<at::Tensor>(x.select(1, static_cast<int64_t>(e))));
  return at::stack(outs, 1);
}

MOELayerImpl::MOELayerImpl(const MoEOptions& options, const ExpertBuilder& build)
    : options_(options) {
  DS_CHECK_T(ConfigError, options_.ep_size >= 1, "moe: ep_size must be >= 1, got ",
             options_.ep_size);
  DS_CHECK_T(ConfigError, options_.num_experts >= 1 && options_.num_experts % options_.ep_size == 0,
             "moe: num_experts (", options_.num_experts,
             ") must be a positive multiple of ep_size (", options_.ep_size, ")");
  gate = register_module("gate", TopKGate(options_.hidden_size, options_.gate_options()));
  groups_ = expert_groups(static_cast<int>(options_.ep_size));
  const int ep_rank = groups_.expert_parallel.is_member() ? groups_.expert_parallel.rank() : 0;
  experts = register_module(
      "experts", Experts(build, options_.num_experts, static_cast<int>(options_.ep_size), ep_rank));
}

MOELayerImpl::Output MOELayerImpl::forward(const at::Tensor& x) {
  const int64_t hidden = options_.hidden_size;
  DS_CHECK(x.dim() >= 1 && x.size(-1) == hidden, "moe: input's last dimension is ",
           x.dim() ? x.size(-1) : 0, ", expected hidden_size ", hidden);
  at::Tensor tokens = x.reshape({-1, hidden});
  const int64_t S = tokens.size(0);
  const int64_t E = options_.num_experts;
  const comm::ProcessGroup& ep = groups_.expert_parallel;
  // The gate needs no group: with drop_tokens false its local largest load keeps every token here,
  // and the maximum below makes the buffers agree.
  Routing r = gate->forward(tokens);
  // Ranks of an expert-parallel group exchange [E, C, hidden] buffers, so they must agree on C even
  // when their token counts differ (the last, short batch): take the largest.
  int64_t C = r.capacity;
  if (ep.is_member() && ep.size() > 1) {
    at::Tensor c = at::tensor({C}, at::kLong);
    comm::ProcessGroup(ep).all_reduce(c, comm::ReduceOp::kMax);
    C = c.item<int64_t>();
  }

  // Dispatch: slot (e, c) of the [E * C] buffer takes token slot_token[e * C + c]; empty slots read
  // a zero row.
  at::Tensor kept = r.slots.ge(0);
  at::Tensor flat = r.experts * C + r.slots.clamp_min(0);  // [S, k]
  const auto index_options = tokens.options().dtype(at::kLong);  // indices on the tokens' device
  at::Tensor token_of = at::arange(S, index_options).unsqueeze(1).expand_as(flat);
  at::Tensor slot_token = at::full({E * C}, S, index_options);
  slot_token.index_put_({flat.masked_select(kept)}, token_of.masked_select(kept));
  at::Tensor padded = at::cat({tokens, at::zeros({1, hidden}, tokens.options())});
  at::Tensor dispatched = padded.index_select(0, slot_token).view({E, C, hidden});

  // [E, C, h] -> every rank's tokens for this rank's experts, [ep, E_local, C, h] -> experts ->
  // back.
  const int64_t ep_size = options_.ep_size;
  at::Tensor received = all_to_all(dispatched, ep).view({ep_size, E / ep_size, C, hidden});
  at::Tensor expert_out = experts->forward(received);
  at::Tensor returned = all_to_all(expert_out.reshape({E, C, hidden}), ep).view({E * C, hidden});

  // Combine: each token's k choices, weighted (dropped choices weigh 0 and read slot 0 of their
  // expert).
  const int64_t k = flat.size(1);
  at::Tensor picked = returned.index_select(0, flat.reshape({-1})).view({S, k, hidden});
  at::Tensor w = r.weights.to(picked.scalar_type()).unsqueeze(-1);
  at::Tensor combined = (picked * w).sum(1);
  return {combined.view(x.sizes()), r.l_aux, r.exp_counts};
}

MoEImpl::MoEImpl(const MoEOptions& options, const ExpertBuilder& build) : options_(options) {
  deepspeed_moe = register_module("deepspeed_moe", MOELayer(options_, build));
  if (options_.use_residual) {
    mlp = build(options_.num_experts);
    DS_CHECK(!mlp.is_empty(),
             "moe: the expert builder returned an empty module for the residual MLP");
    register_module("mlp", mlp.ptr());
    coefficient = register_module("coefficient", torch::nn::Linear(options_.hidden_size, 2));
  }
}

MoEImpl::Output MoEImpl::forward(const at::Tensor& x) {
  Output out = deepspeed_moe->forward(x);
  if (options_.use_residual) {
    // Residual MoE: a dense MLP beside the experts, mixed per token by a learned 2-way softmax.
    at::Tensor dense = mlp.forward<at::Tensor>(x);
    at::Tensor coef = at::softmax(coefficient->forward(x), -1);
    out.output = out.output * coef.narrow(-1, 0, 1) + dense * coef.narrow(-1, 1, 1);
  }
  return out;
}

}  // namespace deepspeed::moe
