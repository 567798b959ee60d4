// Top-k gating (deepspeed/moe/gate.h). Every step is a [tokens, experts] op (one_hot, cumsum, top-k
// along the tokens); nothing [tokens, experts, capacity] is ever built, so the cost does not grow
// with capacity.
#include "deepspeed/moe/gate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "deepspeed/error.h"

namespace deepspeed::moe {

NoisyGatePolicy parse_noisy_gate_policy(const std::string& name) {
  if (name.empty() || name == "None") return NoisyGatePolicy::kNone;
  if (name == "Jitter") return NoisyGatePolicy::kJitter;
  if (name == "RSample") return NoisyGatePolicy::kRSample;
  throw ConfigError(detail::str_cat("moe: noisy_gate_policy '", name,
                                    "' is not one of 'None', 'Jitter', 'RSample'"));
}

std::string noisy_gate_policy_name(NoisyGatePolicy policy) {
  switch (policy) {
    case NoisyGatePolicy::kNone:
      return "None";
    case NoisyGatePolicy::kJitter:
      return "Jitter";
    case NoisyGatePolicy::kRSample:
      return "RSample";
  }
  DS_ASSERT(false, "unknown NoisyGatePolicy ", static_cast<int>(policy));
  return {};
}

void check_gate_options(const GateOptions& o) {
  DS_CHECK_T(ConfigError, o.num_experts >= 1, "moe: num_experts must be >= 1, got ", o.num_experts);
  DS_CHECK_T(ConfigError, o.k >= 1 && o.k <= o.num_experts, "moe: k must be in 1..num_experts (",
             o.num_experts, "), got ", o.k);
  // `> 0` is false for NaN, so a NaN factor is rejected too.
  DS_CHECK_T(ConfigError, o.capacity_factor > 0, "moe: capacity_factor must be > 0, got ",
             o.capacity_factor);
  DS_CHECK_T(ConfigError, o.eval_capacity_factor > 0, "moe: eval_capacity_factor must be > 0, got ",
             o.eval_capacity_factor);
  DS_CHECK_T(ConfigError, o.min_capacity >= 0, "moe: min_capacity must be >= 0, got ",
             o.min_capacity);
  DS_CHECK_T(
      ConfigError, o.noisy_gate_policy != NoisyGatePolicy::kRSample || o.k == 1,
      "moe: noisy_gate_policy 'RSample' needs k = 1 (DeepSpeed samples only the top-1 choice), "
      "got k = ",
      o.k);
}

int64_t gate_capacity(int64_t num_tokens, int64_t num_experts, int64_t k, double factor,
                      int64_t min_capacity) {
  DS_CHECK(num_experts >= 1, "moe: gate_capacity needs num_experts >= 1, got ", num_experts);
  // In float32, as DeepSpeed's tensor arithmetic does it, so buffers match a DeepSpeed run's:
  // 50 tokens * 0.3f is 15.000001 there, so 16 slots, where double arithmetic gives 15.
  const auto per_expert = static_cast<float>(static_cast<double>(num_tokens) / num_experts);
  const auto scaled_factor = static_cast<float>(factor * static_cast<double>(k));
  const auto capacity = static_cast<int64_t>(std::ceil(per_expert * scaled_factor));
  return std::max(capacity, min_capacity);
}

namespace {

constexpr float kEps = std::numeric_limits<float>::epsilon();

// U[0, 1) shaped like `like`. [tokens, experts] values are drawn even where only one per token is
// used, so the stream matches torch.rand of the same shape: a run seeded like a DeepSpeed one picks
// the same tokens.
at::Tensor uniform_like(const at::Tensor& like, const std::optional<at::Generator>& generator) {
  if (!generator) return at::rand(like.sizes(), like.options().dtype(at::kFloat));
  c10::optional<at::Generator> gen = *generator;
  // A generator draws on its own device (a CPU generator for CUDA logits is allowed), then moves.
  auto options = like.options().dtype(at::kFloat).device(generator->device());
  return at::rand(like.sizes(), gen, options).to(like.device());
}

// Standard Gumbel noise as torch.distributions.Gumbel(0, 1).rsample draws it: u in [tiny, 1 - eps]
// keeps both logarithms finite.
at::Tensor gumbel_like(const at::Tensor& like, const std::optional<at::Generator>& generator) {
  at::Tensor u =
      uniform_like(like, generator).mul_(1.0f - kEps).add_(std::numeric_limits<float>::min());
  return u.log_().neg_().log_().neg_();
}

// [tokens, experts] bool, true where a token chose the expert.
at::Tensor choice_mask(const at::Tensor& experts, int64_t num_experts) {
  return at::zeros({experts.size(0), num_experts}, experts.options().dtype(at::kBool))
      .scatter_(1, experts, true);
}

// Of the tokens in `mask`, each expert keeps the first `capacity` in token order.
at::Tensor keep_first(const at::Tensor& mask, int64_t capacity) {
  return mask.logical_and(mask.cumsum(0, at::kLong).le(capacity));
}

// Of the tokens in `mask`, each expert keeps the `capacity` with the highest score (in [0, 1]).
at::Tensor keep_highest(const at::Tensor& mask, const at::Tensor& score, int64_t capacity) {
  if (capacity >= mask.size(0)) return mask;
  // Tokens that did not choose the expert rank below all that did, even one scoring exactly 0.
  at::Tensor ranked = score.masked_fill(mask.logical_not(), -1.0);
  at::Tensor top = std::get<1>(ranked.topk(capacity, /*dim=*/0));  // [capacity, experts]
  return mask.logical_and(at::zeros_like(mask).scatter_(0, top, true));
}

// Each choice's slot: its position among the tokens its expert kept, in token order (-1: dropped).
at::Tensor slots_of(const at::Tensor& kept, const at::Tensor& experts) {
  at::Tensor slots = kept.cumsum(0, at::kLong).sub_(1).gather(1, experts);
  return slots.masked_fill_(kept.gather(1, experts).logical_not(), -1);
}

// me * ce summed over experts: the load-balancing loss before each policy's scaling.
at::Tensor balance(const at::Tensor& gates, const at::Tensor& mask) {
  return (gates.mean(0) * mask.to(at::kFloat).mean(0)).sum();
}

struct Gating {
  const at::Tensor& logits;  // fp32, still attached to the caller's graph
  const at::Tensor& gates;   // softmax(logits)
  const GateOptions& options;
  bool training;
  const comm::ProcessGroup& group;
  const std::optional<at::Generator>& generator;

  // With dropping, the configured capacity; without, the largest load (over the group, whose ranks
  // exchange [experts, capacity, hidden] buffers and so must agree on capacity).
  int64_t capacity(const at::Tensor& exp_counts) const {
    const int64_t tokens = logits.size(0);
    if (options.drop_tokens) {
      const double factor = training ? options.capacity_factor : options.eval_capacity_factor;
      return gate_capacity(tokens, options.num_experts, options.k, factor, options.min_capacity);
    }
    int64_t load = exp_counts.max().item<int64_t>();
    if (group.is_member() && group.size() > 1) {
      at::Tensor t = at::tensor({load}, at::kLong);
      comm::ProcessGroup(group).all_reduce(t, comm::ReduceOp::kMax);
      load = t.item<int64_t>();
    }
    return load;
  }
};

Routing top1(const Gating& g) {
  const int64_t E = g.options.num_experts;
  at::Tensor pick_from = g.gates;
  if (g.training && g.options.noisy_gate_policy == NoisyGatePolicy::kRSample) {
    pick_from = g.logits.detach() + gumbel_like(g.logits, g.generator);
  }
  Routing r;
  r.experts = pick_from.argmax(1, /*keepdim=*/true);
  at::Tensor mask = choice_mask(r.experts, E);
  r.exp_counts = mask.sum(0, false, at::kLong);
  r.capacity = g.capacity(r.exp_counts);
  r.l_aux = balance(g.gates, mask) * static_cast<double>(E);
  // Random Token Selection: an over-full expert keeps random tokens rather than the batch's first
  // ones, so late tokens are not always the ones dropped.
  at::Tensor kept = g.training && g.options.use_rts
                        ? keep_highest(mask, uniform_like(g.logits, g.generator), r.capacity)
                        : keep_first(mask, r.capacity);
  r.slots = slots_of(kept, r.experts);
  r.weights = g.gates.gather(1, r.experts) * r.slots.ge(0);
  return r;
}

Routing top2(const Gating& g) {
  const int64_t E = g.options.num_experts;
  at::Tensor first = g.gates.argmax(1, /*keepdim=*/true);
  at::Tensor mask1 = choice_mask(first, E);
  at::Tensor second_from = g.logits.detach();
  if (g.training && g.options.top2_2nd_expert_sampling) {
    second_from = second_from + gumbel_like(g.logits, g.generator);
  }
  at::Tensor second =
      second_from.masked_fill(mask1, -std::numeric_limits<float>::infinity()).argmax(1, true);
  at::Tensor mask2 = choice_mask(second, E);

  Routing r;
  at::Tensor count1 = mask1.sum(0, /*keepdim=*/true, at::kLong);
  r.exp_counts = (count1 + mask2.sum(0, true, at::kLong)).squeeze(0);
  r.capacity = g.capacity(r.exp_counts);
  r.l_aux = balance(g.gates, mask1) * static_cast<double>(E);  // E * E * mean = E * sum
  // Every first choice precedes every second choice in an expert's buffer, dropped or not, so
  // positions are known before dropping and capacity cuts the tail.
  at::Tensor slot1 = mask1.cumsum(0, at::kLong).sub_(1).gather(1, first);
  at::Tensor slot2 = mask2.cumsum(0, at::kLong).add_(count1).sub_(1).gather(1, second);
  r.experts = at::cat({first, second}, 1);
  r.slots = at::cat({slot1, slot2}, 1);
  // Without dropping this is all true: capacity is then the largest load.
  at::Tensor kept = r.slots.lt(r.capacity);
  r.slots.masked_fill_(kept.logical_not(), -1);
  at::Tensor kept_gates = g.gates.gather(1, r.experts) * kept;
  r.weights = kept_gates / kept_gates.sum(1, true).clamp_min(kEps);
  return r;
}

Routing topk(const Gating& g) {
  const int64_t E = g.options.num_experts;
  const int64_t k = g.options.k;
  Routing r;
  r.experts = std::get<1>(g.gates.detach().topk(k, /*dim=*/1));
  at::Tensor mask = choice_mask(r.experts, E);
  r.exp_counts = mask.sum(0, false, at::kLong);
  r.capacity = g.capacity(r.exp_counts);
  r.l_aux = balance(g.gates, mask) * (static_cast<double>(E) / k);  // E * E / k * mean
  // DeepSpeed's "probs" drop policy: an over-full expert keeps the tokens it matters most to.
  at::Tensor kept = g.options.drop_tokens ? keep_highest(mask, g.gates.detach(), r.capacity) : mask;
  r.slots = slots_of(kept, r.experts);
  at::Tensor kept_gates = g.gates.gather(1, r.experts) * r.slots.ge(0);
  r.weights = kept_gates / kept_gates.sum(1, true).clamp_min(kEps);
  return r;
}

}  // namespace

Routing top_k_gating(const at::Tensor& logits, const GateOptions& options, bool training,
                     const comm::ProcessGroup& group, std::optional<at::Generator> generator) {
  check_gate_options(options);
  DS_CHECK(logits.dim() == 2 && logits.size(1) == options.num_experts,
           "moe: gate logits must be [tokens, num_experts = ", options.num_experts, "], got ",
           logits.sizes());
  DS_CHECK(logits.is_floating_point(), "moe: gate logits must be floating point, got ",
           logits.scalar_type());
  const at::Tensor logits32 = logits.to(at::kFloat);
  const at::Tensor gates = logits32.softmax(1);
  const Gating g{logits32, gates, options, training, group, generator};
  Routing r = options.k == 1 ? top1(g) : options.k == 2 ? top2(g) : topk(g);
  r.l_aux = r.l_aux.to(at::promote_types(logits.scalar_type(), at::kFloat));
  return r;
}

}  // namespace deepspeed::moe
