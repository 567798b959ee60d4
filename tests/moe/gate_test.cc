// Top-k gating checked against a plain dense reference written the way DeepSpeed's sharded_moe.py
// computes it: one-hot [tokens, experts] masks, cumsum locations and a dense [tokens, experts,
// capacity] combine tensor. Our index-form routing is expanded to that tensor and compared element
// by element; random draws come from generators seeded alike, so the reference takes the same noise
// and the same random token selection.
#include "deepspeed/moe/gate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "deepspeed/error.h"
#include "tolerance.h"

namespace deepspeed::moe {
namespace {

using ::testing::HasSubstr;

constexpr float kEps = std::numeric_limits<float>::epsilon();

at::Generator seeded(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// ---- The dense reference ------------------------------------------------------------------------

struct Dense {
  at::Tensor l_aux;
  at::Tensor combine;     // [S, E, C]
  at::Tensor exp_counts;  // [E]
  int64_t capacity = 0;
};

// DeepSpeed's _capacity: ceil(tokens / experts * factor) in float32 tensors, at least min_capacity.
int64_t ref_capacity(int64_t S, int64_t E, double factor, int64_t min_capacity) {
  at::Tensor c = at::ceil(at::scalar_tensor(factor, at::kFloat) * (static_cast<double>(S) / E));
  return std::max(c.item<int64_t>(), min_capacity);
}

// torch.distributions.Gumbel(0, 1).rsample: uniform on [tiny, 1 - eps], then -log(-log(u)).
at::Tensor ref_gumbel(at::IntArrayRef shape, at::Generator& gen) {
  const float low = std::numeric_limits<float>::min();
  const float high = 1 - kEps;
  at::Tensor u = low + at::rand(shape, gen) * (high - low);
  return -at::log(-at::log(u));
}

Dense ref_top1(const at::Tensor& logits, double factor, int64_t min_capacity, bool drop_tokens,
               bool rsample, bool rts, at::Generator* gen) {
  const int64_t S = logits.size(0), E = logits.size(1);
  at::Tensor logits_w_noise;
  if (rsample) logits_w_noise = logits + ref_gumbel(logits.sizes(), *gen);
  at::Tensor gates = at::softmax(logits, 1);
  int64_t capacity = ref_capacity(S, E, factor, min_capacity);
  at::Tensor indices1_s = at::argmax(rsample ? logits_w_noise : gates, 1);
  at::Tensor mask1 = at::one_hot(indices1_s, E);
  at::Tensor exp_counts = mask1.sum(0);
  if (!drop_tokens) capacity = exp_counts.max().item<int64_t>();
  at::Tensor me = gates.mean(0), ce = mask1.to(at::kFloat).mean(0);
  at::Tensor l_aux = (me * ce).sum() * E;
  if (rts) {
    at::Tensor mask1_rand = mask1 * at::rand(mask1.sizes(), *gen);
    at::Tensor top_idx = std::get<1>(at::topk(mask1_rand, std::min(capacity, S), 0));
    mask1 = mask1 * at::zeros_like(mask1).scatter_(0, top_idx, 1);
  } else {
    // DeepSpeed takes the top `capacity` of the 0/1 mask itself, an order torch leaves unspecified
    // among equal values; the contract is first come, first served.
    mask1 = mask1 * at::cumsum(mask1, 0).le(capacity);
  }
  at::Tensor locations1 = at::cumsum(mask1, 0) - 1;
  at::Tensor locations1_s = (locations1 * mask1).sum(1);
  at::Tensor kept_gates = gates * mask1.to(at::kFloat);
  at::Tensor locations1_sc = at::one_hot(locations1_s, capacity).to(at::kFloat);
  return {l_aux, at::einsum("se,sc->sec", {kept_gates, locations1_sc}), exp_counts, capacity};
}

Dense ref_top2(const at::Tensor& logits, double factor, int64_t min_capacity, bool drop_tokens,
               bool sampling, at::Generator* gen) {
  const int64_t S = logits.size(0), E = logits.size(1);
  at::Tensor gates = at::softmax(logits, 1);
  at::Tensor indices1_s = at::argmax(gates, 1);
  at::Tensor mask1 = at::one_hot(indices1_s, E);
  at::Tensor noisy = sampling ? logits + ref_gumbel(logits.sizes(), *gen) : logits;
  at::Tensor logits_except1 =
      noisy.masked_fill(mask1.to(at::kBool), -std::numeric_limits<float>::infinity());
  at::Tensor mask2 = at::one_hot(at::argmax(logits_except1, 1), E);
  at::Tensor locations1 = at::cumsum(mask1, 0) - 1;
  at::Tensor locations2 = at::cumsum(mask2, 0) - 1 + mask1.sum(0, /*keepdim=*/true);
  at::Tensor me = gates.mean(0), ce = mask1.to(at::kFloat).mean(0);
  at::Tensor l_aux = (me * ce).mean() * E * E;
  at::Tensor exp_counts = (mask1 + mask2).sum(0);
  int64_t capacity;
  if (drop_tokens) {
    capacity = ref_capacity(S, E, factor * 2, min_capacity);
    mask1 = mask1 * locations1.lt(capacity);
    mask2 = mask2 * locations2.lt(capacity);
  } else {
    capacity = exp_counts.max().item<int64_t>();
  }
  at::Tensor locations1_s = (locations1 * mask1).sum(1), locations2_s = (locations2 * mask2).sum(1);
  at::Tensor mask1_float = mask1.to(at::kFloat), mask2_float = mask2.to(at::kFloat);
  at::Tensor gates1_s = (gates * mask1_float).sum(1), gates2_s = (gates * mask2_float).sum(1);
  at::Tensor denom_s = at::clamp_min(gates1_s + gates2_s, kEps);
  at::Tensor gates1 = (gates1_s / denom_s).unsqueeze(1) * mask1_float;
  at::Tensor gates2 = (gates2_s / denom_s).unsqueeze(1) * mask2_float;
  at::Tensor locations1_sc = at::one_hot(locations1_s, capacity).to(at::kFloat);
  at::Tensor locations2_sc = at::one_hot(locations2_s, capacity).to(at::kFloat);
  at::Tensor combine = at::einsum("se,sc->sec", {gates1, locations1_sc}) +
                       at::einsum("se,sc->sec", {gates2, locations2_sc});
  return {l_aux, combine, exp_counts, capacity};
}

Dense ref_topk(const at::Tensor& logits, int64_t k, double factor, int64_t min_capacity,
               bool drop_tokens) {
  const int64_t S = logits.size(0), E = logits.size(1);
  at::Tensor gates = at::softmax(logits, 1);
  auto [top_gate, top_idx] = at::topk(gates, k, 1);
  at::Tensor mask = at::zeros_like(gates, at::kBool).scatter_(1, top_idx, true);
  at::Tensor exp_counts = mask.sum(0);
  at::Tensor me = gates.mean(0), ce = mask.to(at::kFloat).mean(0);
  at::Tensor l_aux = (me * ce).mean() * E * E / k;
  int64_t capacity;
  if (drop_tokens) {  // the "probs" drop policy
    capacity = ref_capacity(S, E, factor * k, min_capacity);
    at::Tensor topk_masked_gates = at::zeros_like(gates).scatter(1, top_idx, top_gate);
    at::Tensor capacity_indices =
        std::get<1>(at::topk(topk_masked_gates, std::min(capacity, S), 0));
    mask = mask.logical_and(at::zeros_like(gates, at::kBool).scatter_(0, capacity_indices, true));
  } else {
    capacity = exp_counts.max().item<int64_t>();
  }
  at::Tensor locations = at::cumsum(mask, 0) - 1;
  at::Tensor gates_masked = gates * mask;
  gates_masked = gates_masked / at::clamp_min(gates_masked.sum(-1, /*keepdim=*/true), kEps);
  at::Tensor locations_sc = at::one_hot(locations * mask, capacity).to(at::kFloat);
  return {l_aux, at::einsum("se,sec->sec", {gates_masked, locations_sc}), exp_counts, capacity};
}

// The reference for `o`, with the noise the header turns on in training only. `gen` feeds the
// random draws.
Dense reference(const at::Tensor& logits, const GateOptions& o, bool training, at::Generator* gen) {
  const double factor = training ? o.capacity_factor : o.eval_capacity_factor;
  if (o.k == 1) {
    return ref_top1(logits, factor, o.min_capacity, o.drop_tokens,
                    training && o.noisy_gate_policy == NoisyGatePolicy::kRSample,
                    training && o.use_rts, gen);
  }
  if (o.k == 2) {
    return ref_top2(logits, factor, o.min_capacity, o.drop_tokens,
                    training && o.top2_2nd_expert_sampling, gen);
  }
  return ref_topk(logits, o.k, factor, o.min_capacity, o.drop_tokens);
}

// ---- Helpers ------------------------------------------------------------------------------------

// Our index form as DeepSpeed's [S, E, C] combine tensor (differentiable through the weights).
at::Tensor to_dense(const Routing& r, int64_t E) {
  const int64_t S = r.experts.size(0);
  const int64_t C = r.capacity;
  at::Tensor kept = r.slots.ge(0);
  at::Tensor token = at::arange(S).unsqueeze(1).expand_as(r.experts);
  at::Tensor flat = ((token * E + r.experts) * C + r.slots).masked_select(kept);
  return at::zeros({S * E * C}).index_add(0, flat, r.weights.masked_select(kept)).view({S, E, C});
}

// Shapes, dtypes, and no two kept choices sharing an (expert, slot).
void expect_well_formed(const Routing& r, int64_t S, int64_t E, int64_t k) {
  ASSERT_EQ(r.experts.sizes(), (std::vector<int64_t>{S, k}));
  ASSERT_EQ(r.slots.sizes(), r.experts.sizes());
  ASSERT_EQ(r.weights.sizes(), r.experts.sizes());
  EXPECT_EQ(r.experts.scalar_type(), at::kLong);
  EXPECT_EQ(r.slots.scalar_type(), at::kLong);
  EXPECT_EQ(r.weights.scalar_type(), at::kFloat);
  EXPECT_EQ(r.l_aux.dim(), 0);
  EXPECT_TRUE(r.slots.lt(r.capacity).all().item<bool>());
  EXPECT_TRUE(r.slots.ge(-1).all().item<bool>());
  EXPECT_TRUE(r.weights.masked_select(r.slots.lt(0)).eq(0).all().item<bool>());
  at::Tensor kept = r.slots.ge(0);
  at::Tensor flat = (r.experts * r.capacity + r.slots).masked_select(kept);
  at::Tensor occupancy =
      at::zeros({E * r.capacity + 1}, at::kLong).index_add_(0, flat, at::ones_like(flat));
  EXPECT_LE(occupancy.max().item<int64_t>(), 1) << "two choices share a slot";
}

void expect_matches(const Routing& r, const Dense& ref, int64_t E) {
  ASSERT_EQ(r.capacity, ref.capacity);
  EXPECT_TRUE(at::equal(r.exp_counts, ref.exp_counts))
      << "ours " << r.exp_counts << "\nreference " << ref.exp_counts;
  at::Tensor ours = to_dense(r, E);
  EXPECT_TRUE(at::equal(ours.ne(0), ref.combine.ne(0))) << "different tokens in different slots";
  // Both take the softmax over E experts and renormalise over the k kept gates in float: sums of at most 2E
  // terms, in other orders. l_aux sums a T x E product (T tokens): T * E terms.
  EXPECT_WITHIN(tolerance::relative_max_error(ours, ref.combine),
                tolerance::reordered(tolerance::kFp32Epsilon, 2 * E, 1))
      << "combine weights differ";
  const int64_t T = ref.combine.size(0);
  EXPECT_WITHIN(std::abs(r.l_aux.item<double>() - ref.l_aux.item<double>()) / std::abs(ref.l_aux.item<double>()),
                tolerance::reordered(tolerance::kFp32Epsilon, T * E, 1));
}

GateOptions options_for(int64_t E, int64_t k, double factor, int64_t min_capacity) {
  GateOptions o;
  o.num_experts = E;
  o.k = k;
  o.capacity_factor = factor;
  o.eval_capacity_factor = 2 * factor;  // distinct, so a wrong choice of factor shows
  o.min_capacity = min_capacity;
  o.use_rts = false;
  o.top2_2nd_expert_sampling = false;
  return o;
}

struct Case {
  int64_t tokens, experts;
  double factor;
  int64_t min_capacity;
};
const std::vector<Case> kCases = {
    {16, 4, 1.0, 4}, {32, 8, 0.5, 0}, {64, 8, 1.25, 4}, {48, 6, 1.0, 0}, {64, 4, 0.75, 0}};

// Logits with some experts favoured, so that experts overflow and tokens get dropped.
at::Tensor random_logits(int64_t S, int64_t E, uint64_t seed) {
  at::Generator gen = seeded(seed);
  return at::randn({S, E}, gen) * 1.5 + at::linspace(1.0, 0.0, E);
}

// Every case and seed, in training and eval, against the reference; some choices must be dropped.
void check_against_reference(int64_t k, bool drop_tokens) {
  int64_t dropped = 0;
  for (const Case& c : kCases) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      for (bool training : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "S=" << c.tokens << " E=" << c.experts << " factor=" << c.factor
                     << " seed=" << seed << " training=" << training);
        GateOptions o = options_for(c.experts, k, c.factor, c.min_capacity);
        o.drop_tokens = drop_tokens;
        at::Tensor logits = random_logits(c.tokens, c.experts, seed);
        Routing r = top_k_gating(logits, o, training);
        expect_well_formed(r, c.tokens, c.experts, k);
        expect_matches(r, reference(logits, o, training, nullptr), c.experts);
        dropped += r.slots.lt(0).sum().item<int64_t>();
      }
    }
  }
  if (drop_tokens) {
    EXPECT_GT(dropped, 0) << "no case dropped anything: the capacity path went untested";
  } else {
    EXPECT_EQ(dropped, 0);
  }
}

// ---- Options and capacity -----------------------------------------------------------------------

TEST(GateOptions, NoisyGatePolicyNamesRoundTrip) {
  EXPECT_EQ(parse_noisy_gate_policy("None"), NoisyGatePolicy::kNone);
  EXPECT_EQ(parse_noisy_gate_policy(""), NoisyGatePolicy::kNone);
  for (auto p : {NoisyGatePolicy::kNone, NoisyGatePolicy::kJitter, NoisyGatePolicy::kRSample}) {
    EXPECT_EQ(parse_noisy_gate_policy(noisy_gate_policy_name(p)), p);
  }
  EXPECT_EQ(noisy_gate_policy_name(NoisyGatePolicy::kRSample), "RSample");
  try {
    parse_noisy_gate_policy("rsample");
    FAIL() << "a misspelt policy was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("noisy_gate_policy"));
    EXPECT_THAT(e.what(), HasSubstr("rsample"));
  }
}

TEST(GateOptions, BadOptionsThrowConfigErrorNamingTheField) {
  struct Bad {
    const char* field;
    void (*spoil)(GateOptions&);
  };
  const std::vector<Bad> bad = {
      {"moe: num_experts ", [](GateOptions& o) { o.num_experts = 0; }},
      {"moe: k ", [](GateOptions& o) { o.k = 0; }},
      {"moe: k ", [](GateOptions& o) { o.k = 5; }},
      {"moe: capacity_factor ", [](GateOptions& o) { o.capacity_factor = 0; }},
      {"moe: capacity_factor ", [](GateOptions& o) { o.capacity_factor = std::nan(""); }},
      {"moe: eval_capacity_factor ", [](GateOptions& o) { o.eval_capacity_factor = -1; }},
      {"moe: min_capacity ", [](GateOptions& o) { o.min_capacity = -1; }},
      {"moe: noisy_gate_policy ",
       [](GateOptions& o) {
         o.noisy_gate_policy = NoisyGatePolicy::kRSample;
         o.k = 2;
       }},
  };
  for (const Bad& b : bad) {
    GateOptions o = options_for(4, 1, 1.0, 0);
    b.spoil(o);
    try {
      check_gate_options(o);
      ADD_FAILURE() << "accepted: " << b.field;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(b.field));
    }
    // The gate checks its options too.
    EXPECT_THROW(top_k_gating(at::zeros({8, 4}), o, true), ConfigError) << b.field;
  }
  GateOptions ok = options_for(4, 4, 1.0, 0);  // k == num_experts is allowed
  ok.noisy_gate_policy = NoisyGatePolicy::kJitter;
  EXPECT_NO_THROW(check_gate_options(ok));
  ok.k = 1;
  ok.noisy_gate_policy = NoisyGatePolicy::kRSample;
  EXPECT_NO_THROW(check_gate_options(ok));
  EXPECT_THROW(top_k_gating(at::zeros({8, 3}), ok, true), Error);  // logits for 3 experts, not 4
}

TEST(GateCapacity, Table) {
  struct Row {
    int64_t tokens, experts, k;
    double factor;
    int64_t min_capacity, expected;
  };
  const std::vector<Row> rows = {
      {64, 8, 1, 1.0, 4, 8},  {64, 8, 2, 1.0, 4, 16}, {64, 8, 1, 1.25, 4, 10},
      {64, 8, 3, 0.5, 0, 12}, {10, 4, 1, 1.0, 4, 4},  {10, 4, 1, 1.0, 0, 3},
      {16, 8, 1, 0.1, 0, 1},  {7, 3, 2, 1.0, 0, 5},   {0, 4, 1, 1.0, 2, 2},
      {50, 1, 1, 0.3, 0, 16},  // float32 as in DeepSpeed: 50 * 0.3f is 15.000001 (15 in double)
      {70, 3, 1, 0.3, 0, 8},   // 23.333334f * 0.3f = 7.0000005 (7 in double)
  };
  for (const Row& w : rows) {
    SCOPED_TRACE(testing::Message() << w.tokens << " tokens, " << w.experts << " experts, k=" << w.k
                                    << ", factor " << w.factor << ", min " << w.min_capacity);
    EXPECT_EQ(gate_capacity(w.tokens, w.experts, w.k, w.factor, w.min_capacity), w.expected);
    EXPECT_EQ(ref_capacity(w.tokens, w.experts, w.factor * w.k, w.min_capacity), w.expected);
  }
}

TEST(GateCapacity, EvalUsesEvalCapacityFactor) {
  GateOptions o = options_for(8, 1, 2.0, 0);
  o.eval_capacity_factor = 0.5;
  at::Tensor logits = random_logits(64, 8, 1);
  EXPECT_EQ(top_k_gating(logits, o, /*training=*/true).capacity, 16);
  EXPECT_EQ(top_k_gating(logits, o, /*training=*/false).capacity, 4);
  o.k = 2;
  EXPECT_EQ(top_k_gating(logits, o, true).capacity, 32);
  EXPECT_EQ(top_k_gating(logits, o, false).capacity, 8);
}

// ---- Hand-chosen routings ----------------------------------------------------------------------

TEST(TopKGating, Top1HandChosenDropsTheThirdTokenOfAFullExpert) {
  // Capacity ceil(6 / 3) = 2; expert 0 is chosen by tokens 0, 2 and 3, so token 3 is dropped.
  at::Tensor logits = at::tensor({2.f, 0.f, 0.f, 0.f, 3.f, 0.f, 1.f, 0.f, 0.f,  //
                                  4.f, 0.f, 1.f, 0.f, 0.f, 2.f, 0.f, 1.f, 0.f})
                          .reshape({6, 3});
  GateOptions o = options_for(3, 1, 1.0, 0);
  o.eval_capacity_factor = 1.0;
  Routing r = top_k_gating(logits, o, /*training=*/false);
  EXPECT_EQ(r.capacity, 2);
  EXPECT_TRUE(at::equal(r.experts.flatten(), at::tensor({0, 1, 0, 0, 2, 1}, at::kLong)));
  EXPECT_TRUE(at::equal(r.slots.flatten(), at::tensor({0, 0, 1, -1, 0, 1}, at::kLong)));
  EXPECT_TRUE(at::equal(r.exp_counts, at::tensor({3, 2, 1}, at::kLong)));
  at::Tensor gates = at::softmax(logits, 1);
  at::Tensor expected_w = gates.gather(1, r.experts).flatten().clone();
  expected_w[3] = 0;
  // The same softmax over 3 experts (3-term sums) and a 6 x 3 mean for l_aux, in other orders.
  EXPECT_WITHIN(tolerance::relative_max_error(r.weights.flatten(), expected_w),
                tolerance::reordered(tolerance::kFp32Epsilon, 3, 1));
  const double l_aux = 3 * (gates.mean(0) * at::tensor({3.f, 2.f, 1.f}) / 6).sum().item<double>();
  EXPECT_WITHIN(std::abs(r.l_aux.item<double>() - l_aux) / l_aux, tolerance::reordered(tolerance::kFp32Epsilon, 18, 1));
}

TEST(TopKGating, Top2HandChosenSecondChoicesQueueBehindFirstChoices) {
  // Capacity ceil(4 / 3 * 0.5 * 2) = 2. Expert 0 is every token's first choice but token 3's, so
  // token 2's first choice is dropped (its second, expert 2, keeps the whole weight) and token 3's
  // second choice, queued behind expert 0's three first choices, is dropped too.
  at::Tensor logits =
      at::tensor({3.f, 2.f, 0.f, 3.f, 0.f, 2.f, 3.f, 0.f, 1.f, 2.f, 3.f, 0.f}).reshape({4, 3});
  GateOptions o = options_for(3, 2, 0.5, 0);
  o.eval_capacity_factor = 0.5;
  Routing r = top_k_gating(logits, o, /*training=*/false);
  EXPECT_EQ(r.capacity, 2);
  EXPECT_TRUE(
      at::equal(r.experts, at::tensor({0, 1, 0, 2, 0, 2, 1, 0}, at::kLong).reshape({4, 2})));
  EXPECT_TRUE(
      at::equal(r.slots, at::tensor({0, 1, 1, 0, -1, 1, 0, -1}, at::kLong).reshape({4, 2})));
  EXPECT_TRUE(at::equal(r.exp_counts, at::tensor({4, 2, 2}, at::kLong)));
  const float p = 1 / (1 + std::exp(-1.f));  // e^3 / (e^3 + e^2)
  at::Tensor expected_w = at::tensor({p, 1 - p, p, 1 - p, 0.f, 1.f, 1.f, 0.f}).reshape({4, 2});
  // A softmax over 3 experts in float (3-term sum) and a renormalisation over 2 gates, against closed-form values.
  EXPECT_WITHIN(tolerance::relative_max_error(r.weights, expected_w), tolerance::reordered(tolerance::kFp32Epsilon, 5, 1))
      << r.weights;
}

TEST(TopKGating, Top3HandChosenKeepsTheHighestGatesNotTheFirstTokens) {
  // Each row is a permutation of 0..3, so across rows a higher logit is a higher gate. Token i
  // skips expert i, so each expert is chosen by three tokens and keeps two (4 / 4 * 0.5 * 3 = 1.5,
  // rounded up). Expert 0 keeps tokens 2 and 3 (logits 2, 3) and drops token 1, the first to come.
  at::Tensor logits = at::tensor({0.f, 3.f, 2.f, 1.f, 1.f, 0.f, 3.f, 2.f,  //
                                  2.f, 1.f, 0.f, 3.f, 3.f, 2.f, 1.f, 0.f})
                          .reshape({4, 4});
  GateOptions o = options_for(4, 3, 0.5, 0);
  o.eval_capacity_factor = 0.5;
  Routing r = top_k_gating(logits, o, /*training=*/false);
  EXPECT_EQ(r.capacity, 2);
  EXPECT_TRUE(at::equal(
      r.experts, at::tensor({1, 2, 3, 2, 3, 0, 3, 0, 1, 0, 1, 2}, at::kLong).reshape({4, 3})));
  EXPECT_TRUE(at::equal(
      r.slots, at::tensor({0, 0, -1, 1, 0, -1, 1, 0, -1, 1, 1, -1}, at::kLong).reshape({4, 3})));
  EXPECT_TRUE(at::equal(r.exp_counts, at::tensor({3, 3, 3, 3}, at::kLong)));
  const float p = 1 / (1 + std::exp(-1.f));
  // A softmax over 4 experts, renormalised over 3 gates, against closed-form values: 7 roundings' worth.
  EXPECT_WITHIN(tolerance::relative_max_error(r.weights, at::tensor({p, 1 - p, 0.f}).repeat({4, 1})),
                tolerance::reordered(tolerance::kFp32Epsilon, 7, 1))
      << r.weights;
  // E * E / k * mean(1/4 * 3/4): a 4 x 4 mean in float.
  EXPECT_WITHIN(std::abs(r.l_aux.item<double>() - 1.0), tolerance::reordered(tolerance::kFp32Epsilon, 16, 1));
}

// ---- Against the dense reference ----------------------------------------------------------------

TEST(TopKGating, Top1MatchesDenseReference) { check_against_reference(1, /*drop_tokens=*/true); }
TEST(TopKGating, Top2MatchesDenseReference) { check_against_reference(2, /*drop_tokens=*/true); }
TEST(TopKGating, Top3MatchesDenseReference) { check_against_reference(3, /*drop_tokens=*/true); }

TEST(TopKGating, WithoutDroppingEveryChoiceIsKeptAndCapacityIsTheLargestLoad) {
  for (int64_t k : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "k=" << k);
    check_against_reference(k, /*drop_tokens=*/false);
    GateOptions o = options_for(8, k, 0.25, 0);
    o.drop_tokens = false;
    Routing r = top_k_gating(random_logits(64, 8, 7), o, true);
    EXPECT_EQ(r.capacity, r.exp_counts.max().item<int64_t>());
    EXPECT_GT(r.capacity, gate_capacity(64, 8, k, 0.25, 0));  // what dropping would have allowed
    EXPECT_TRUE(r.slots.ge(0).all().item<bool>());
    if (k > 1) {
      // k gates divided by their float sum, summed again: about 2k roundings of values below 1.
      EXPECT_WITHIN(tolerance::relative_max_error(r.weights.sum(1), at::ones({64})),
                    tolerance::reordered(tolerance::kFp32Epsilon, 2 * k, 1))
          << "kept gates renormalise to 1";
    }
  }
}

// ---- Randomness ---------------------------------------------------------------------------------

TEST(TopKGating, RandomTokenSelectionMatchesReferenceWithTheSameGenerator) {
  int64_t differs_from_first_come = 0;
  for (const Case& c : kCases) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      SCOPED_TRACE(testing::Message()
                   << "S=" << c.tokens << " E=" << c.experts << " seed=" << seed);
      GateOptions o = options_for(c.experts, 1, c.factor, c.min_capacity);
      o.use_rts = true;
      at::Tensor logits = random_logits(c.tokens, c.experts, seed);
      at::Generator ours = seeded(100 + seed), theirs = seeded(100 + seed),
                    again = seeded(100 + seed);
      Routing r = top_k_gating(logits, o, /*training=*/true, {}, ours);
      expect_well_formed(r, c.tokens, c.experts, 1);
      expect_matches(r, reference(logits, o, true, &theirs), c.experts);

      // Exactly `capacity` of an over-full expert's tokens stay, all of them tokens routed there.
      EXPECT_TRUE(at::equal(r.experts.squeeze(1), at::argmax(logits, 1)));
      at::Tensor kept_per_expert =
          at::zeros({c.experts}, at::kLong)
              .index_add_(0, r.experts.squeeze(1), r.slots.ge(0).squeeze(1).to(at::kLong));
      EXPECT_TRUE(at::equal(kept_per_expert, r.exp_counts.clamp_max(r.capacity)));

      Routing r2 = top_k_gating(logits, o, true, {}, again);
      EXPECT_TRUE(at::equal(r.slots, r2.slots)) << "same seed, different selection";
      EXPECT_TRUE(at::equal(r.weights, r2.weights));

      GateOptions eval = o;  // eval: no RTS, same capacity
      eval.eval_capacity_factor = o.capacity_factor;
      Routing first_come = top_k_gating(logits, eval, /*training=*/false);
      differs_from_first_come += !at::equal(r.slots, first_come.slots);
    }
  }
  EXPECT_GT(differs_from_first_come, 0) << "RTS always picked the first tokens";
}

TEST(TopKGating, RSampleChangesTheChoiceOnlyInTraining) {
  GateOptions o = options_for(4, 1, 1.0, 0);
  o.noisy_gate_policy = NoisyGatePolicy::kRSample;
  o.use_rts = true;  // its uniform draws come after the Gumbel noise, as in DeepSpeed
  at::Tensor logits = at::randn({32, 4}, seeded(5)) * 0.1;  // close logits: noise often wins
  at::Tensor argmax = at::argmax(logits, 1);
  for (uint64_t seed = 0; seed < 3; ++seed) {
    at::Generator gen = seeded(seed);
    Routing eval = top_k_gating(logits, o, /*training=*/false, {}, gen);
    EXPECT_TRUE(at::equal(eval.experts.squeeze(1), argmax));
  }
  int64_t changed = 0;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    at::Generator ours = seeded(seed), theirs = seeded(seed);
    Routing train = top_k_gating(logits, o, /*training=*/true, {}, ours);
    expect_matches(train, reference(logits, o, true, &theirs), 4);
    changed += train.experts.squeeze(1).ne(argmax).sum().item<int64_t>();
  }
  EXPECT_GT(changed, 0);
}

TEST(TopKGating, Top2SecondChoiceSamplingMatchesReference) {
  int64_t changed = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    GateOptions o = options_for(8, 2, 1.0, 4);
    o.top2_2nd_expert_sampling = true;
    at::Tensor logits = random_logits(48, 8, seed);
    at::Generator ours = seeded(seed), theirs = seeded(seed);
    Routing r = top_k_gating(logits, o, /*training=*/true, {}, ours);
    expect_matches(r, reference(logits, o, true, &theirs), 8);
    at::Tensor plain_second = std::get<1>(at::topk(logits, 2, 1)).select(1, 1);
    EXPECT_TRUE(at::equal(r.experts.select(1, 0), at::argmax(logits, 1)));
    changed += r.experts.select(1, 1).ne(plain_second).sum().item<int64_t>();
    Routing eval = top_k_gating(logits, o, /*training=*/false, {}, ours);
    EXPECT_TRUE(at::equal(eval.experts.select(1, 1), plain_second)) << "noise in eval";
  }
  EXPECT_GT(changed, 0);
}

// ---- Gradients and dtypes -----------------------------------------------------------------------

TEST(TopKGating, GradientsReachTheLogitsAsInTheReference) {
  for (int64_t k : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "k=" << k);
    GateOptions o = options_for(6, k, 0.75, 0);
    at::Tensor base = random_logits(32, 6, 11);
    at::Tensor ours_in = base.clone().requires_grad_(), ref_in = base.clone().requires_grad_();
    Routing r = top_k_gating(ours_in, o, /*training=*/true);
    Dense ref = reference(ref_in, o, true, nullptr);
    ASSERT_EQ(r.capacity, ref.capacity);
    at::Tensor coeff = at::randn({32, 6, r.capacity}, seeded(12));
    ((to_dense(r, 6) * coeff).sum() + 0.5 * r.l_aux).backward();
    ((ref.combine * coeff).sum() + 0.5 * ref.l_aux).backward();
    EXPECT_GT(ours_in.grad().abs().sum().item<double>(), 0);
    // Backward through the softmax, the renormalisation and l_aux's 32 x 6 mean, in other orders.
    EXPECT_WITHIN(tolerance::relative_max_error(ours_in.grad(), ref_in.grad()),
                  tolerance::reordered(tolerance::kFp32Epsilon, 32 * 6, 1))
        << "ours\n"
        << ours_in.grad() << "\nreference\n"
        << ref_in.grad();

    // The aux loss alone has a gradient too.
    at::Tensor aux_in = base.clone().requires_grad_();
    top_k_gating(aux_in, o, true).l_aux.backward();
    EXPECT_GT(aux_in.grad().abs().sum().item<double>(), 0);
  }
}

TEST(TopKGating, HalfPrecisionLogitsGiveFp32Outputs) {
  GateOptions o = options_for(4, 2, 1.0, 0);
  at::Tensor logits = random_logits(16, 4, 3);
  Routing half = top_k_gating(logits.to(at::kBFloat16), o, false);
  EXPECT_EQ(half.weights.scalar_type(), at::kFloat);
  EXPECT_EQ(half.l_aux.scalar_type(), at::kFloat);
  expect_matches(half, reference(logits.to(at::kBFloat16).to(at::kFloat), o, false, nullptr), 4);
}

}  // namespace
}  // namespace deepspeed::moe
