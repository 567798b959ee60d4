// The Mixture-of-Experts layer: DeepSpeed's deepspeed.moe.layer.MoE for LibTorch models.
//
// MoE(options, build_expert) replaces a dense block (typically a transformer's MLP) with
// `num_experts` copies of it, of which each token uses k, chosen by a learned top-k gate
// (deepspeed/moe/gate.h). Experts are split over `ep_size` ranks (expert parallelism): each rank
// holds num_experts / ep_size of them, tokens travel to their experts' ranks and back by
// all-to-all. The ranks form groups as DeepSpeed forms them for a world of W:
//   expert-parallel groups       {0..ep-1}, {ep..2ep-1}, ...   (together they hold every expert
//   once) expert-data-parallel groups  {j, j+ep, j+2ep, ...}         (the ranks holding the same
//   experts)
// The engine (deepspeed::initialize) finds the experts in the model and reduces their gradients
// over their expert-data-parallel group (and, at ZeRO 1/2, partitions their optimizer state over
// it), the other parameters over the whole data-parallel world as usual; nothing for the caller to
// split by hand.
//
// forward() returns the output (same shape as the input), the load-balancing loss to add to the
// training loss (times a coefficient of the caller's choice, e.g. 0.01) and the per-expert token
// counts.
//
// Parameter names follow DeepSpeed's: deepspeed_moe.gate.wg.weight,
// deepspeed_moe.experts.deepspeed_experts.<i>.* (i: local index), and with use_residual mlp.* and
// coefficient.*.
//
// Every rank must build its MoE layers in the same order (the first layer with a given ep_size
// creates that ep_size's process groups, collectively) and call them the same number of times.
// Token counts may differ between ranks: an expert-parallel group agrees on the largest capacity
// before it exchanges buffers.
//
// Precision: routing is computed in fp32; in a bf16/fp16 engine the gate's weight is stored in the
// model's dtype like every other parameter (DeepSpeed keeps it in fp32), so routing sees a rounded
// weight.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/moe/gate.h"

namespace deepspeed::moe {

// The process groups for one ep_size (see above), over the world. Created on first use: a
// collective call that every rank must make in the same order. Throws ConfigError when ep_size < 1
// or does not divide the world size.
struct ExpertGroups {
  int ep_size = 1;
  comm::ProcessGroup expert_parallel;       // this rank's group of ep_size ranks
  comm::ProcessGroup expert_data_parallel;  // the ranks holding the same experts as this one
  std::string name;                         // "ep_size_<n>", DeepSpeed's group name
};
// The groups of the current world: they end with it (destroy_process_group), and after a new
// init_distributed the first call builds them again. A layer keeps the handles it was built with.
ExpertGroups expert_groups(int ep_size);

struct MoEOptions {
  int64_t hidden_size = 0;
  int64_t num_experts = 1;
  int64_t ep_size = 1;
  int64_t k = 1;
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int64_t min_capacity = 4;
  // Residual MoE (DeepSpeed's use_residual, from PR-MoE): a dense MLP runs beside the experts and a
  // learned per-token softmax coefficient mixes the two outputs.
  bool use_residual = false;
  NoisyGatePolicy noisy_gate_policy = NoisyGatePolicy::kNone;
  bool drop_tokens = true;
  bool use_rts = true;
  bool top2_2nd_expert_sampling = true;

  GateOptions gate_options() const;
};

// Builds one expert: a module mapping [..., hidden] to [..., hidden]. `expert_id` is the global
// expert index (0..num_experts-1; num_experts for the residual MLP), so a builder can seed each
// expert's initialisation by id and get the same experts whatever ep_size splits them.
using ExpertBuilder = std::function<torch::nn::AnyModule(int64_t expert_id)>;

// The gate's linear layer (hidden -> experts, no bias, applied in fp32) and the routing it feeds.
class TopKGateImpl : public torch::nn::Module {
 public:
  TopKGateImpl(int64_t hidden_size, GateOptions options);
  // x: [tokens, hidden]. Jitter (if chosen) is applied to x here, in training only.
  Routing forward(const at::Tensor& x, const comm::ProcessGroup& capacity_group = {});
  const GateOptions& options() const { return options_; }

  torch::nn::Linear wg{nullptr};

 private:
  GateOptions options_;
};
TORCH_MODULE(TopKGate);

// This rank's experts (num_experts / ep_size of them, global ids first_expert() onward).
class ExpertsImpl : public torch::nn::Module {
 public:
  ExpertsImpl(const ExpertBuilder& build, int64_t num_experts, int ep_size, int ep_rank);
  // x: [ep_size, local experts, capacity, hidden] -> same shape, local expert e applied to x[:, e].
  at::Tensor forward(const at::Tensor& x);
  int64_t num_local_experts() const { return static_cast<int64_t>(deepspeed_experts->size()); }
  int64_t first_expert() const { return first_expert_; }
  int ep_size() const { return ep_size_; }

  torch::nn::ModuleList deepspeed_experts;

 private:
  std::vector<torch::nn::AnyModule>
      modules_;  // the same experts, callable (ModuleList holds them untyped)
  int64_t first_expert_ = 0;
  int ep_size_ = 1;
};
TORCH_MODULE(Experts);

// DeepSpeed's MOELayer: gate, dispatch to the experts (all-to-all across the expert-parallel
// group), combine.
class MOELayerImpl : public torch::nn::Module {
 public:
  MOELayerImpl(const MoEOptions& options, const ExpertBuilder& build);
  struct Output {
    at::Tensor output;      // [..., hidden]
    at::Tensor l_aux;       // scalar
    at::Tensor exp_counts;  // [num_experts] int64, this rank's tokens
  };
  Output forward(const at::Tensor& x);

  TopKGate gate{nullptr};
  Experts experts{nullptr};

 private:
  MoEOptions options_;
  ExpertGroups groups_;  // of the world the layer was built in
};
TORCH_MODULE(MOELayer);

class MoEImpl : public torch::nn::Module {
 public:
  // Throws ConfigError for num_experts not divisible by ep_size, ep_size not dividing the world,
  // bad gate options.
  MoEImpl(const MoEOptions& options, const ExpertBuilder& build);
  using Output = MOELayerImpl::Output;
  Output forward(const at::Tensor& x);
  const MoEOptions& options() const { return options_; }

  MOELayer deepspeed_moe{nullptr};
  torch::nn::AnyModule mlp;                // use_residual only
  torch::nn::Linear coefficient{nullptr};  // use_residual only

 private:
  MoEOptions options_;
};
TORCH_MODULE(MoE);

}  // namespace deepspeed::moe
