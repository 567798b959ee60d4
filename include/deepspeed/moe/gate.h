// Top-k gating for Mixture-of-Experts layers: which expert each token goes to, in which of the
// expert's `capacity` slots, with which combine weight, plus the load-balancing loss. DeepSpeed's
// top1gating / top2gating / topkgating (deepspeed/moe/sharded_moe.py), with the same meanings:
//
//   capacity = max(ceil(k * tokens / experts * capacity_factor), min_capacity)   (eval:
//   eval_capacity_factor) k = 1: each token's argmax expert (over logits plus Gumbel noise with
//   noisy_gate_policy RSample); when an
//          expert gets more tokens than slots it keeps `capacity` of them, chosen at random with
//          use_rts (Random Token Selection), else the first in token order. Weight = the softmax
//          gate. l_aux = E * sum(me * ce).
//   k = 2: first choice = argmax; second = argmax of the rest (of logits plus Gumbel noise with
//          top2_2nd_expert_sampling). Slots are filled first choices first, then second choices,
//          each in token order; choices past capacity are dropped. The kept choices' gates are
//          renormalised to sum to 1. l_aux = E * E * mean(me * ce) over first choices.
//   k >= 3: the k highest gates; an over-full expert keeps the tokens with the highest gate for it
//   (DeepSpeed's
//          "probs" drop policy); slots in token order; kept gates renormalised. l_aux = E * E / k *
//          mean(me * ce) over all k choices.
// where me[e] = mean over tokens of softmax gate e, ce[e] = fraction of tokens choosing e (before
// dropping). With drop_tokens false nothing is dropped: capacity becomes the largest expert load
// (the max over `group` when given, so all ranks of an expert-parallel group agree on the buffer
// shape).
//
// Routing is returned in index form ([tokens, k] experts / slots / weights) rather than DeepSpeed's
// dense [tokens, experts, capacity] masks, so dispatch and combine are gathers, not einsums over
// mostly zeros.
//
// Thread-safety: none needed (pure functions; randomness from the global generator or `generator`).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "deepspeed/comm.h"

namespace deepspeed::moe {

enum class NoisyGatePolicy { kNone, kJitter, kRSample };

// "None" (or ""), "Jitter", "RSample", as DeepSpeed spells them; anything else throws ConfigError
// naming it.
NoisyGatePolicy parse_noisy_gate_policy(const std::string& name);
std::string noisy_gate_policy_name(NoisyGatePolicy policy);

struct GateOptions {
  int64_t num_experts = 1;
  int64_t k = 1;
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int64_t min_capacity = 4;
  // kJitter multiplies the gate's input by U(1 - 1e-2, 1 + 1e-2) (applied by TopKGate, before the
  // gate's linear layer); kRSample adds Gumbel noise to the logits that pick the expert (k = 1
  // only, as in DeepSpeed). Training only.
  NoisyGatePolicy noisy_gate_policy = NoisyGatePolicy::kNone;
  bool drop_tokens = true;
  bool use_rts = true;  // k = 1: random choice among an over-full expert's tokens (training only)
  bool top2_2nd_expert_sampling = true;  // k = 2: Gumbel noise on the second choice (training only)
};

// Throws ConfigError naming the field for num_experts < 1, k outside 1..num_experts, factors <= 0,
// min_capacity < 0, or RSample with k != 1.
void check_gate_options(const GateOptions& options);

// Slots per expert for `num_tokens` tokens (see the formula above).
int64_t gate_capacity(int64_t num_tokens, int64_t num_experts, int64_t k, double factor,
                      int64_t min_capacity);

struct Routing {
  at::Tensor l_aux;      // scalar, logits' dtype promoted to fp32; differentiable w.r.t. the logits
  int64_t capacity = 0;  // slots per expert
  at::Tensor experts;    // [tokens, k] int64: the expert of each token's j-th choice
  at::Tensor
      slots;  // [tokens, k] int64: that choice's slot in its expert's buffer, -1 when dropped
  at::Tensor weights;  // [tokens, k] fp32: combine weights, differentiable w.r.t. the logits; 0
                       // where dropped
  at::Tensor
      exp_counts;  // [experts] int64: tokens whose choices named each expert, before dropping
};

// logits: [tokens, experts], floating point (computed in fp32). `training` selects capacity_factor
// (else eval_capacity_factor) and turns the noise / random selection on. `group`: see drop_tokens
// above (null: none). `generator`: for the random draws (default: the global CPU generator).
Routing top_k_gating(const at::Tensor& logits, const GateOptions& options, bool training,
                     const comm::ProcessGroup& group = {},
                     std::optional<at::Generator> generator = std::nullopt);

}  // namespace deepspeed::moe
