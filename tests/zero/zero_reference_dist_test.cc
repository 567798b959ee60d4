// Every ZeRO stage (0-3), with optimizer offload to CPU and to NVMe, against the plain single-process LibTorch run
// (tiny_gpt::train_reference) with SGD: no momentum and no clipping, so each update is lr times the gradient, and a
// gradient summed instead of averaged over the ranks, or a missing 1 / gradient_accumulation_steps, moves the
// weights by a multiple of the reference's movement (Adam would hide both: it is invariant to a constant gradient
// scale). SGD + L2 checks that the decay is added to the averaged gradient, once. The engine's global gradient
// norm is compared with the reference's at every step, which checks the gradient scale whatever the optimizer.
// Stage 3 also reports each rank's optimizer-state and fp32-master bytes.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/adamw.h>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "tiny_gpt.h"
#include "tolerance.h"
#include "zero/partition.h"

namespace {

constexpr int kSteps = 5;
constexpr int64_t kMicro = 2;
constexpr double kLr = 0.5;

struct Case {
  std::string name;
  int stage = 0;
  double weight_decay = 0.0;
  int64_t gas = 1;
  std::string zero_extra;  // extra zero_optimization keys
  std::string top_extra;   // extra top-level keys (a scheduler)
  std::string optimizer;   // the optimizer section; empty: SGD with lr kLr and `weight_decay`
};

std::string reference_nvme_dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/ds_zero_ref_nvme_XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return dir;
}

struct EngineRun {
  std::vector<at::Tensor> params;
  std::vector<double> grad_norms;
  std::vector<double> lrs;  // each step's learning rate, read before it
  deepspeed::ModelStateBytes bytes;
};

EngineRun train_engine(const Case& c) {
  tiny_gpt::ensure_comm();
  deepspeed::models::GPTConfig cfg = tiny_gpt::config();
  cfg.shard_blocks = c.stage == 3;  // the blocks are stage 3's units (a pass-through at stages 0-2)
  deepspeed::models::GPT model = tiny_gpt::make_model(cfg);
  const std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(kMicro) +
                           ", \"gradient_accumulation_steps\": " + std::to_string(c.gas) +
                           ", \"steps_per_print\": 1000, \"gradient_clipping\": 0, \"optimizer\": " +
                           (c.optimizer.empty() ? tiny_gpt::sgd_json(kLr, c.weight_decay) : c.optimizer) +
                           ", \"zero_optimization\": {\"stage\": " + std::to_string(c.stage) + c.zero_extra + "}" +
                           c.top_extra + "}";
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
  EngineRun out;
  const auto data = tiny_gpt::dataset(cfg);
  for (int step = 0; step < kSteps; ++step) {
    out.lrs.push_back(engine.get_lr().at(0));  // what this step will use
    tiny_gpt::train(engine, data, 1, step, &out.grad_norms);
  }
  out.bytes = engine.model_state_bytes();
  deepspeed::zero::GatheredParameters full(*model);
  out.params = tiny_gpt::snapshot(model);
  return out;
}

// The engine and the reference sum each weight's gradient over the global batch's tokens in another order (per
// rank and micro-batch, then across them, vs one matmul over all of them): `tokens` terms per sum, over kSteps.
double bound_for(int64_t gas) {
  const int64_t tokens = deepspeed::comm::get_world_size() * kMicro * gas * tiny_gpt::config().seq_len;
  return tolerance::reordered(tolerance::kFp32Epsilon, tokens, kSteps);
}

// `make_step` builds the reference's optimizer step from the engine run's learning rates (torch's SGD by default).
using MakeStepFromLrs = std::function<tiny_gpt::MakeReferenceStep(const std::vector<double>& lrs)>;

void expect_matches_reference(const Case& c, const MakeStepFromLrs& make_step = nullptr) {
  tiny_gpt::ensure_comm();
  const int world = deepspeed::comm::get_world_size();
  const EngineRun run = train_engine(c);
  const tiny_gpt::Reference ref =
      tiny_gpt::train_reference(tiny_gpt::config(), world, kMicro, c.gas, kSteps, 0.0,
                                make_step ? make_step(run.lrs) : tiny_gpt::sgd_step(kLr, c.weight_decay));
  const double bound = bound_for(c.gas);
  // The bound must be far below what a wrong scale does: a gradient off by a factor f moves the weights by
  // (f - 1) times the reference's movement, so the movement must dwarf the bound.
  const auto initial = tiny_gpt::snapshot(tiny_gpt::make_model(tiny_gpt::config()));
  ASSERT_GT(tiny_gpt::max_relative_error(ref.params, initial), 20 * bound) << "training must move the weights";
  EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), bound) << c.name;
  ASSERT_EQ(run.grad_norms.size(), ref.grad_norms.size());
  for (size_t s = 0; s < ref.grad_norms.size(); ++s)
    EXPECT_WITHIN(std::abs(run.grad_norms[s] - ref.grad_norms[s]) / ref.grad_norms[s], bound)
        << c.name << ", step " << s;
}

TEST(ZeroReference, SgdMatchesPlainLibTorchAtEveryStage) {
  for (int stage : {0, 1, 2, 3}) {
    for (int64_t gas : {1, 3}) {
      expect_matches_reference({"sgd stage " + std::to_string(stage) + " gas " + std::to_string(gas), stage, 0.0, gas});
    }
  }
}

TEST(ZeroReference, SgdWithL2MatchesPlainLibTorchAtEveryStage) {
  for (int stage : {0, 1, 2, 3}) expect_matches_reference({"sgd+l2 stage " + std::to_string(stage), stage, 0.01, 2});
}

TEST(ZeroReference, SgdWithOptimizerOffloadMatchesPlainLibTorch) {
  tiny_gpt::ensure_comm();
  const std::string cpu = ", \"offload_optimizer\": {\"device\": \"cpu\"}";
  // sub_group_size 1000 (1024 elements) swaps each partition in several slices.
  const std::string nvme = ", \"sub_group_size\": 1000, \"offload_optimizer\": {\"device\": \"nvme\", "
                           "\"nvme_path\": \"" + reference_nvme_dir() + "\"}";
  for (int stage : {1, 2, 3}) {
    expect_matches_reference({"cpu offload stage " + std::to_string(stage), stage, 0.01, 2, cpu});
    expect_matches_reference({"nvme offload stage " + std::to_string(stage), stage, 0.0, 2, nvme});
  }
  deepspeed::comm::barrier();  // every rank's swapper is gone before the directory goes
  std::filesystem::remove_all(reference_nvme_dir());
}

// offload_optimizer.overlap_step: the CPU step of step t runs during step t+1's forward and backward, so step t+1's
// gradients are taken at step t-1's parameters (ZenFlow's one-step-stale rule). The reference applies that rule in a
// plain LibTorch loop: fp32 masters take torch's SGD step at step k's learning rate, and just before it the model's
// parameters take what the masters held after step k-1.
using MakeTorchOptimizer = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>& masters)>;

tiny_gpt::MakeReferenceStep one_step_stale(std::vector<double> lrs, MakeTorchOptimizer make_optimizer) {
  return [lrs, make_optimizer](std::vector<at::Tensor>& params) -> tiny_gpt::ReferenceStep {
    auto masters = std::make_shared<std::vector<at::Tensor>>();
    for (const auto& p : params) masters->push_back(p.detach().clone());
    std::shared_ptr<torch::optim::Optimizer> opt = make_optimizer(*masters);
    auto step = std::make_shared<size_t>(0);
    return [params, masters, opt, lrs, step] {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        (*masters)[i].mutable_grad() = params[i].grad().detach().clone();
        params[i].copy_((*masters)[i]);  // the update of the step before lands now
      }
      opt->param_groups()[0].options().set_lr(lrs.at((*step)++));
      opt->step();
    };
  };
}

tiny_gpt::MakeReferenceStep one_step_stale_sgd(std::vector<double> lrs, double weight_decay) {
  return one_step_stale(std::move(lrs), [weight_decay](std::vector<at::Tensor>& masters) {
    return std::make_shared<torch::optim::SGD>(masters, torch::optim::SGDOptions(1.0).weight_decay(weight_decay));
  });
}

TEST(ZeroReference, OverlappedOptimizerStepMatchesTheOneStepStaleLoop) {
  tiny_gpt::ensure_comm();
  // A warmup schedule: each step's update must take that step's learning rate although the scheduler moves on
  // while the update runs.
  const std::string schedule = ", \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0.1, "
                               "\"warmup_max_lr\": 0.5, \"warmup_num_steps\": 4, \"warmup_type\": \"linear\"}}";
  const std::string overlap = ", \"offload_optimizer\": {\"device\": \"cpu\", \"overlap_step\": true}";
  for (int stage : {1, 2, 3}) {
    for (int64_t gas : {int64_t{1}, int64_t{2}}) {
      Case c{"overlap_step stage " + std::to_string(stage) + " gas " + std::to_string(gas), stage, 0.01, gas, overlap,
             stage == 2 ? schedule : ""};
      expect_matches_reference(c, [&](const std::vector<double>& lrs) { return one_step_stale_sgd(lrs, 0.01); });
    }
  }
  // AdamW (torch's, on the reference's masters): the overlapped thread runs the fused CPU kernel with its moments.
  // Adam turns rounding differences in near-zero gradients into full-size updates, so no closed form holds:
  // measured at both SIMD levels (tests/common/tolerance.h): 1-4 ranks, worst at 4.
  const double adam_bound = tolerance::measured(1.31e-6, 1.23e-6);
  for (int stage : {1, 3}) {
    Case c{"overlap_step adamw stage " + std::to_string(stage), stage, 0.0, 1, overlap, ""};
    c.optimizer = "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.1}}";
    const EngineRun run = train_engine(c);
    const tiny_gpt::Reference ref = tiny_gpt::train_reference(
        tiny_gpt::config(), deepspeed::comm::get_world_size(), kMicro, 1, kSteps, 0.0,
        one_step_stale(run.lrs, [](std::vector<at::Tensor>& masters) {
          return std::make_shared<torch::optim::AdamW>(masters, torch::optim::AdamWOptions(0.003).weight_decay(0.1));
        }));
    EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), adam_bound) << c.name;
  }
  // The rule is not the synchronous step's: the two references part by far more than the tolerance, so a run that
  // did not overlap (or landed the update before the next forward) fails the comparison above.
  const int world = deepspeed::comm::get_world_size();
  const auto sync = tiny_gpt::train_reference(tiny_gpt::config(), world, kMicro, 1, kSteps, 0.0,
                                              tiny_gpt::sgd_step(kLr, 0.01));
  const auto stale = tiny_gpt::train_reference(tiny_gpt::config(), world, kMicro, 1, kSteps, 0.0,
                                               one_step_stale_sgd(std::vector<double>(kSteps, kLr), 0.01));
  EXPECT_GT(tiny_gpt::max_relative_error(stale.params, sync.params), 20 * bound_for(1));
}

// Stage 3 keeps 1/world of the fp32 state: for bf16 AdamW, each rank holds fp32 masters (4 bytes), Adam's two
// moments (8 bytes) and an fp32 gradient (4 bytes) per element of its partition. A partition is a 1/world share of
// each unit's flat buffer, whose tensors start at aligned offsets: at most one alignment unit (kPartitionAlign
// elements) of padding per tensor and one per unit and rank beyond an exact 1/world share. A rank holding the
// whole state (or a second copy) is off by a factor of the world size.
TEST(ZeroReference, StageThreeOptimizerStateAndMastersArePartitioned) {
  tiny_gpt::ensure_comm();
  const int64_t n = deepspeed::comm::get_world_size();
  deepspeed::models::GPTConfig cfg = tiny_gpt::config();
  cfg.shard_blocks = true;
  deepspeed::models::GPT model = tiny_gpt::make_model(cfg);
  int64_t elements = 0, tensors = 0;
  for (const auto& p : model->parameters()) {
    elements += p.numel();
    ++tensors;
  }
  const int64_t units = cfg.layers + 1;  // one per block, plus the root unit
  const int64_t kAlign = deepspeed::zero::kPartitionAlign;
  auto engine = deepspeed::initialize(
      model, deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
          "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})"));
  tiny_gpt::train(engine, tiny_gpt::dataset(cfg), 1);
  const deepspeed::ModelStateBytes b = engine.model_state_bytes();
  const int64_t master_elems = b.master_weights / 4;
  EXPECT_EQ(b.master_weights % 4, 0);
  EXPECT_GE(master_elems * n, elements) << "every element has its master on some rank";
  EXPECT_LE(master_elems, (elements + n - 1) / n + (tensors + units) * kAlign) << "only this rank's share";
  EXPECT_EQ(b.optimizer_states, 2 * b.master_weights) << "Adam's exp_avg and exp_avg_sq of the partition";
  EXPECT_EQ(b.gradients, b.master_weights) << "fp32 gradient partition, one per master element";
}

}  // namespace

namespace {

// LAMB written out here from FusedLamb's formulas, on the reference's whole tensors: moments as Adam's, the update
// u = m / (sqrt(v) + eps) + wd p, the trust ratio ||p|| / ||u|| clamped to [min_coeff, 10] (1 when either is 0),
// and p -= lr sqrt(1 - b2^t) / (1 - b1^t) ratio u.
tiny_gpt::MakeReferenceStep lamb_reference(double lr, double weight_decay, double min_coeff) {
  return [=](std::vector<at::Tensor>& params) -> tiny_gpt::ReferenceStep {
    auto moments = std::make_shared<std::vector<std::pair<at::Tensor, at::Tensor>>>();
    for (const auto& p : params) moments->emplace_back(at::zeros_like(p), at::zeros_like(p));
    auto t = std::make_shared<int64_t>(0);
    return [params, moments, t, lr, weight_decay, min_coeff]() {
      at::NoGradGuard no_grad;
      const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      ++*t;
      const double step_size = lr * std::sqrt(1 - std::pow(b2, *t)) / (1 - std::pow(b1, *t));
      for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor p = params[i];
        auto& [m, v] = (*moments)[i];
        m.mul_(b1).add_(p.grad(), 1 - b1);
        v.mul_(b2).addcmul_(p.grad(), p.grad(), 1 - b2);
        const at::Tensor u = m / (v.sqrt() + eps) + weight_decay * p;
        const double w_norm = p.norm().item<double>(), u_norm = u.norm().item<double>();
        const double ratio = w_norm > 0 && u_norm > 0 ? std::clamp(w_norm / u_norm, min_coeff, 10.0) : 1.0;
        p.sub_(u, step_size * ratio);
      }
    };
  };
}

}  // namespace

// Lamb (DeepSpeed's FusedLamb arithmetic) at every stage, with optimizer offload to CPU, against the plain loop above.
// Its trust ratio is per tensor while ZeRO partitions cut tensors: a ratio taken over each rank's piece moves each
// piece by another factor. min_coeff is lowered from FusedLamb's 0.01, which the tiny GPT's initial weights (std
// 0.02) fall under, so that the ratios are not all clamped to the same value (which would hide a wrong one).
// Adam-like, it divides by each gradient's running magnitude, so no closed form holds: measured at both SIMD levels
// (tests/common/tolerance.h), 1-4 ranks, worst at 3 (averages over 3 ranks round). A ratio taken per rank's piece
// instead of per tensor measured 7.7e-5 at 2 ranks and 5.1e-4 at 3. The Adam control shows the ratio matters: the
// same moments without it end far away.
TEST(ZeroReference, LambMatchesPlainLibTorchAtEveryStage) {
  tiny_gpt::ensure_comm();
  const double bound = tolerance::measured(2.38e-6, 2.87e-6);
  const char* lamb = "{\"type\": \"Lamb\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01, \"min_coeff\": 1e-4}}";
  const tiny_gpt::Reference ref = tiny_gpt::train_reference(tiny_gpt::config(), deepspeed::comm::get_world_size(), kMicro,
                                                            1, kSteps, 0.0, lamb_reference(0.01, 0.01, 1e-4));
  for (int stage : {0, 1, 2, 3}) {
    for (const char* offload : {"", ", \"offload_optimizer\": {\"device\": \"cpu\"}"}) {
      if (stage == 0 && *offload) continue;
      Case c{"lamb stage " + std::to_string(stage) + (*offload ? " offload cpu" : ""), stage, 0.0, 1, offload, ""};
      c.optimizer = lamb;
      const EngineRun run = train_engine(c);
      EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), bound) << c.name;
    }
  }
  const tiny_gpt::Reference adam = tiny_gpt::train_reference(
      tiny_gpt::config(), deepspeed::comm::get_world_size(), kMicro, 1, kSteps, 0.0,
      [](std::vector<at::Tensor>& params) -> tiny_gpt::ReferenceStep {
        auto opt = std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.01).weight_decay(0.0));
        return [opt] { opt->step(); };
      });
  EXPECT_GT(tiny_gpt::max_relative_error(adam.params, ref.params), 20 * bound);
}

TEST(ZeroReference, LambRefusesStepsItCannotTakeWholeTensorNormsIn) {
  tiny_gpt::ensure_comm();
  deepspeed::models::GPT model = tiny_gpt::make_model(tiny_gpt::config());
  try {
    deepspeed::initialize(model, deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Lamb", "params": {"lr": 0.01}},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "overlap_step": true}}})"));
    ADD_FAILURE() << "Lamb with overlap_step must be refused";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Lamb's per-tensor trust ratio is not supported with "
                                         "zero_optimization.offload_optimizer.overlap_step"),
              std::string::npos)
        << e.what();
  }
  try {
    deepspeed::initialize(model, deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Lamb", "params": {"lr": 0.01, "max_grad_norm": 1.0}}})"));
    ADD_FAILURE() << "Lamb's max_grad_norm must be refused";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.params.max_grad_norm: clip with the top-level gradient_clipping"),
              std::string::npos)
        << e.what();
  }
}

namespace {

// Which of the tiny GPT's parameters Muon must update, spelled out here rather than asked of the library: the
// blocks' Linear weights (2-D, named neither embed nor lm_head). The embeddings wte / wpe (2-D lookup tables),
// lm_head and the norms take the auxiliary AdamW.
std::vector<bool> tiny_gpt_muon_params() {
  std::vector<bool> out;
  const deepspeed::models::GPT model = tiny_gpt::make_model(tiny_gpt::config());
  for (const auto& p : model->named_parameters())
    out.push_back(p.value().dim() == 2 && p.key().rfind("blocks.", 0) == 0);
  return out;
}

// Newton-Schulz as Keller Jordan's Muon writes it: X = G / (||G|| + 1e-7) (transposed when tall), five rounds of
// X = a X + (b A + c A A) X with A = X X^T, transposed back and scaled by sqrt(rows / cols) when tall.
at::Tensor newton_schulz5(const at::Tensor& g, int steps = 5) {
  const bool tall = g.size(0) > g.size(1);
  at::Tensor x = tall ? g.t() : g;
  x = x / (x.norm() + 1e-7);
  for (int i = 0; i < steps; ++i) {
    const at::Tensor a = x.mm(x.t());
    x = 3.4445 * x + (-4.7750 * a + 2.0315 * a.mm(a)).mm(x);
  }
  return tall ? x.t() * std::sqrt(double(g.size(0)) / double(g.size(1))) : x;
}

// Muon with its auxiliary AdamW on the reference's whole tensors: for the matrices, m = beta m + (1 - beta) g, the
// Nesterov update u = beta m + (1 - beta) g, p = p (1 - lr wd) - lr NS(u); torch's AdamW (betas 0.9 / 0.95, eps
// 1e-10) for the rest. `orthogonalize` false leaves NS out: plain Nesterov momentum, the control.
tiny_gpt::MakeReferenceStep muon_reference(double muon_lr, double adam_lr, double beta, double weight_decay,
                                           bool orthogonalize = true) {
  return [=](std::vector<at::Tensor>& params) -> tiny_gpt::ReferenceStep {
    const std::vector<bool> muon = tiny_gpt_muon_params();
    std::vector<at::Tensor> matrices, others;
    for (size_t i = 0; i < params.size(); ++i) (muon.at(i) ? matrices : others).push_back(params[i]);
    auto adam = std::make_shared<torch::optim::AdamW>(
        others, torch::optim::AdamWOptions(adam_lr).betas({0.9, 0.95}).eps(1e-10).weight_decay(weight_decay));
    auto momenta = std::make_shared<std::vector<at::Tensor>>();
    for (const auto& p : matrices) momenta->push_back(at::zeros_like(p));
    return [=] {
      at::NoGradGuard no_grad;
      adam->step();
      for (size_t j = 0; j < matrices.size(); ++j) {
        at::Tensor p = matrices[j], m = (*momenta)[j];
        const at::Tensor g = p.grad();
        m.mul_(beta).add_(g, 1 - beta);
        const at::Tensor u = beta * m + (1 - beta) * g;
        p.mul_(1 - muon_lr * weight_decay).sub_(orthogonalize ? newton_schulz5(u) : u, muon_lr);
      }
    };
  };
}

constexpr const char* kNoPersistence = ", \"stage3_param_persistence_threshold\": 0";

std::string muon_json(const char* ns_method) {
  return std::string(R"({"type": "Muon", "params": {"muon_lr": 0.02, "adam_lr": 0.003, "momentum": 0.9, )") +
         R"("weight_decay": 0.01, "ns_method": ")" + ns_method + "\"}}";
}

}  // namespace

// Muon (DeepSpeed's MuonWithAuxAdam) at every stage, with optimizer offload to CPU, against the plain loop above.
// ZeRO cuts matrices over ranks while Newton-Schulz needs them whole: orthogonalizing each rank's piece instead
// would be another update altogether. Both Newton-Schulz forms (gram is the default) are held to the same bound; the
// quintic amplifies small singular directions (slope 3.4 at zero) and AdamW divides by each gradient's running
// magnitude, so no closed form holds: measured at both SIMD levels, 1-4 ranks (2.8e-6 already at one rank: AdamW's
// kernel against torch's, and Newton-Schulz's matmuls over another memory layout). The control (the same momentum
// without Newton-Schulz) shows the orthogonalization is what the engine reproduces.
TEST(ZeroReference, MuonMatchesPlainLibTorchAtEveryStage) {
  tiny_gpt::ensure_comm();
  const std::vector<bool> muon = tiny_gpt_muon_params();
  ASSERT_EQ(std::count(muon.begin(), muon.end(), true), 4 * tiny_gpt::config().layers);  // qkv, proj, fc, fc_proj
  const double bound = tolerance::measured(3.99e-6, 4.09e-6);
  const int world = deepspeed::comm::get_world_size();
  const tiny_gpt::Reference ref =
      tiny_gpt::train_reference(tiny_gpt::config(), world, kMicro, 1, kSteps, 0.0,
                                muon_reference(0.02, 0.003, 0.9, 0.01));
  const auto initial = tiny_gpt::snapshot(tiny_gpt::make_model(tiny_gpt::config()));
  ASSERT_GT(tiny_gpt::max_relative_error(ref.params, initial), 20 * bound) << "training must move the weights";
  for (int stage : {0, 1, 2, 3}) {
    for (const char* offload : {"", ", \"offload_optimizer\": {\"device\": \"cpu\"}"}) {
      for (const char* ns : {"gram", "standard"}) {
        if ((stage == 0 && *offload) || (*offload && std::string(ns) == "standard")) continue;
        // Stage 3 partitions every parameter (no persistent ones) so that its units' partitions cut matrices at 2
        // ranks already; stages 1 and 2 cut them at 4 (the tiny GPT's Muon buffer splits on whole matrices at 2-3).
        const std::string zero_extra = std::string(offload) + (stage == 3 ? kNoPersistence : "");
        Case c{"muon stage " + std::to_string(stage) + (*offload ? " offload cpu " : " ") + ns, stage, 0.0, 1,
               zero_extra, ""};
        c.optimizer = muon_json(ns);
        const EngineRun run = train_engine(c);
        EXPECT_WITHIN(tiny_gpt::max_relative_error(run.params, ref.params), bound) << c.name;
      }
    }
  }
  const tiny_gpt::Reference momentum_only = tiny_gpt::train_reference(
      tiny_gpt::config(), world, kMicro, 1, kSteps, 0.0, muon_reference(0.02, 0.003, 0.9, 0.01, false));
  EXPECT_GT(tiny_gpt::max_relative_error(momentum_only.params, ref.params), 20 * bound);
}

TEST(ZeroReference, MuonRefusesWhatItCannotDo) {
  tiny_gpt::ensure_comm();
  deepspeed::models::GPT model = tiny_gpt::make_model(tiny_gpt::config());
  auto expect_refused = [&](const std::string& json, const std::string& message) {
    try {
      deepspeed::initialize(model, deepspeed::Config::from_string(json));
      ADD_FAILURE() << "must be refused: " << json;
    } catch (const deepspeed::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_refused(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Muon"},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "overlap_step": true}}})",
                 "Muon's Newton-Schulz step on whole matrices is not supported with "
                 "zero_optimization.offload_optimizer.overlap_step");
  expect_refused(R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Muon", "params": {"per_head_muon": true}}})",
                 "optimizer.params.per_head_muon: not supported yet");
  expect_refused(R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Muon", "params": {"ns_method": "fast"}}})",
                 "optimizer.params.ns_method");
  expect_refused(R"({"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Muon", "params": {"momentum": 1.0}}})",
                 "optimizer.params.momentum");
  expect_refused(R"({"train_micro_batch_size_per_gpu": 2, "checkpoint": {"save_layout": "python_deepspeed"},
        "optimizer": {"type": "Muon"}})",
                 "checkpoint.save_layout: python_deepspeed needs the config's Adam or AdamW optimizer");
}

// Blocks built under zero::Init hold flat partitions until the engine takes them over: Muon must still see their
// weights as matrices (the shapes they had when whole), so the groups split into Muon's (lr 0.02) and Adam's (0.003)
// halves rather than leaving every parameter to Adam.
TEST(ZeroReference, MuonFindsMatricesPartitionedAtConstruction) {
  tiny_gpt::ensure_comm();
  deepspeed::models::GPTConfig cfg = tiny_gpt::config();
  cfg.shard_blocks = true;
  const auto config = deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "Muon", "params": {"muon_lr": 0.02, "adam_lr": 0.003}},
      "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})");
  deepspeed::models::GPT model{nullptr};
  {
    deepspeed::zero::Init init(config);
    model = tiny_gpt::make_model(cfg);
  }
  auto engine = deepspeed::initialize(model, config);
  EXPECT_EQ(engine.get_lr(), (std::vector<double>{0.02, 0.003}));
}
