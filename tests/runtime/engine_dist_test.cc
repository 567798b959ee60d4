// The stage-0 engine against a plain single-process LibTorch run of the same model on the same global batches.
// Run through the launcher at 1, 2 and 4 ranks; every rank also runs the (cheap) reference and compares.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/lr_schedules.h"
#include "gpt.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace {

using deepspeed::models::GPT;
using deepspeed::models::GPTConfig;

using tiny_gpt::kDataSeed;
using tiny_gpt::kSamples;

GPTConfig small_gpt() { return tiny_gpt::config(); }

at::Tensor dataset() {
  static at::Tensor data = tiny_gpt::dataset(small_gpt());
  return data;
}

GPT make_model() { return tiny_gpt::make_model(small_gpt()); }

void forward_batch(const std::vector<int64_t>& idx, at::Tensor* x, at::Tensor* y) {
  tiny_gpt::split_batch(dataset(), idx, x, y);
}

struct RunSpec {
  std::string optimizer;  // the config's optimizer section
  int64_t micro = 2;      // per rank
  int64_t gas = 1;
  double clip = 0.0;
  std::string scheduler;  // optional scheduler section
  int steps = 5;
};

std::string config_json(const RunSpec& r) {
  std::string j = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(r.micro) +
                  ", \"gradient_accumulation_steps\": " + std::to_string(r.gas) +
                  ", \"steps_per_print\": 1000, \"gradient_clipping\": " + std::to_string(r.clip) +
                  ", \"optimizer\": " + r.optimizer;
  if (!r.scheduler.empty()) j += ", \"scheduler\": " + r.scheduler;
  return j + "}";
}

struct EngineResult {
  std::vector<at::Tensor> params;
  std::vector<std::vector<double>> lrs;  // after each step
  std::vector<double> grad_norms;
};

EngineResult run_engine(const RunSpec& r) {
  GPT model = make_model();
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(r)));
  deepspeed::DataParallelSampler sampler(kSamples, r.micro, r.gas, engine.global_rank(), engine.world_size(),
                                         kDataSeed);
  EngineResult out;
  for (int step = 0; step < r.steps; ++step) {
    for (int64_t m = 0; m < r.gas; ++m) {
      at::Tensor x, y;
      forward_batch(sampler.micro_batch(step, m), &x, &y);
      EXPECT_EQ(engine.is_gradient_accumulation_boundary(), m == r.gas - 1);
      at::Tensor loss = engine.forward(x, y);
      engine.backward(loss);
      engine.step();
    }
    EXPECT_EQ(engine.global_steps(), step + 1);
    out.lrs.push_back(engine.get_lr());
    out.grad_norms.push_back(engine.get_global_grad_norm());
  }
  for (const auto& p : model->parameters()) out.params.push_back(p.detach().clone());
  return out;
}

// The reference: one process, the whole global batch at once, a torch optimizer (or a hand-written update).
using StepFn = std::function<void(int step)>;
using MakeStep = std::function<StepFn(std::vector<at::Tensor>& params)>;

// Parameters after the last step, and each step's gradient norm before clipping (summed in double).
tiny_gpt::Reference run_reference(const RunSpec& r, const MakeStep& make_step) {
  GPT model = make_model();
  std::vector<at::Tensor> params = model->parameters();
  StepFn step_fn = make_step(params);
  const int world = deepspeed::comm::get_world_size();
  deepspeed::DataParallelSampler sampler(kSamples, r.micro * r.gas * world, 1, 0, 1, kDataSeed);
  tiny_gpt::Reference out;
  for (int step = 0; step < r.steps; ++step) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor x, y;
    forward_batch(sampler.global_batch(step), &x, &y);
    model->forward(x, y).backward();
    double sq = 0;
    for (const auto& p : params) sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
    out.grad_norms.push_back(std::sqrt(sq));
    if (r.clip > 0) torch::nn::utils::clip_grad_norm_(params, r.clip);
    step_fn(step);
  }
  for (const auto& p : params) out.params.push_back(p.detach().clone());
  return out;
}

template <typename Opt>
MakeStep torch_optimizer(std::function<std::shared_ptr<Opt>(std::vector<at::Tensor>&)> make) {
  return [make](std::vector<at::Tensor>& params) -> StepFn {
    std::shared_ptr<Opt> opt = make(params);
    return [opt](int) { opt->step(); };
  };
}

// The engine and the reference take the same sums in another order (per rank and micro-batch, then across them,
// vs one matmul over the global batch): sums of up to the global batch's tokens. For a non-adaptive update (SGD)
// that bounds the weights after r.steps steps; momentum m carries each gradient's error into later updates, up to
// 1 / (1 - m) times.
double reordered_bound(const RunSpec& r, double momentum = 0.0) {
  const int64_t tokens = deepspeed::comm::get_world_size() * r.micro * r.gas * small_gpt().seq_len;
  return tolerance::reordered(tolerance::kFp32Epsilon, tokens, r.steps) / (1.0 - momentum);
}

// Adaptive optimizers (Adam, Adagrad, Lion) turn rounding differences in near-zero gradients into full-size
// updates of either sign: the worst relative error measured over these tests at both SIMD levels.
const double kAdaptiveBound = tolerance::measured(4.3e-6, 3.6e-6);

// Each parameter within `rel` (relative L2), and each step's gradient norm within the reordered-sum bound of one
// more step (the norm at step s reads weights that already differ by s steps' rounding): the gradient norm is the
// engine's own figure, so a wrong gradient scale (summed over ranks, a missing 1 / gas) fails here whatever the
// optimizer.
void expect_close(const EngineResult& got, const tiny_gpt::Reference& want, double rel, const RunSpec& r) {
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < got.params.size(); ++i) {
    double err = (got.params[i] - want.params[i]).norm().item<double>() / want.params[i].norm().item<double>();
    EXPECT_WITHIN(err, rel) << "parameter " << i << " " << want.params[i].sizes();
  }
  ASSERT_EQ(got.grad_norms.size(), want.grad_norms.size());
  for (size_t s = 0; s < want.grad_norms.size(); ++s) {
    const double err = std::abs(got.grad_norms[s] - want.grad_norms[s]) / want.grad_norms[s];
    EXPECT_WITHIN(err, std::max(rel, reordered_bound(r))) << "gradient norm at step " << s;
  }
}

void expect_moved(const std::vector<at::Tensor>& trained) {
  auto init = make_model()->parameters();
  double moved = 0;
  for (size_t i = 0; i < init.size(); ++i) moved += (trained[i] - init[i]).abs().sum().item<double>();
  EXPECT_GT(moved, 1e-3) << "training changed nothing: the comparison would be vacuous";
}

TEST(EngineStage0, AdamWMatchesSingleProcessTorch) {
  RunSpec r;
  r.optimizer = R"({"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.1}})";
  auto got = run_engine(r);
  auto want = run_reference(r, torch_optimizer<torch::optim::AdamW>([](std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::AdamW>(
        p, torch::optim::AdamWOptions(0.003).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  }));
  expect_moved(got.params);
  expect_close(got, want, kAdaptiveBound, r);
}

TEST(EngineStage0, AdamWithL2MatchesTorchAdam) {
  RunSpec r;
  r.optimizer = R"({"type": "Adam", "params": {"lr": 0.002, "adam_w_mode": false, "weight_decay": 0.01}})";
  auto got = run_engine(r);
  auto want = run_reference(r, torch_optimizer<torch::optim::Adam>([](std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(0.002).weight_decay(0.01));
  }));
  expect_close(got, want, kAdaptiveBound, r);
}

// Micro 2 x gas 4 per rank is the same global batch as micro 8 x gas 1. With SGD (and SGD + L2) the update is lr
// times the averaged gradient, so a missing 1 / gradient_accumulation_steps (4x) or a gradient summed over ranks
// moves the weights by a multiple of the reference's movement; Adam would hide both.
TEST(EngineStage0, GradientAccumulationMatchesOneBigBatch) {
  RunSpec r;
  r.micro = 2;
  r.gas = 4;
  r.optimizer = R"({"type": "Adam", "params": {"lr": 0.002}})";
  auto got = run_engine(r);
  auto want = run_reference(r, torch_optimizer<torch::optim::Adam>([](std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(0.002));
  }));
  expect_close(got, want, kAdaptiveBound, r);
  for (double weight_decay : {0.0, 0.01}) {
    RunSpec sgd = r;
    sgd.optimizer = tiny_gpt::sgd_json(0.5, weight_decay);
    auto sgd_got = run_engine(sgd);
    auto sgd_want = run_reference(sgd, torch_optimizer<torch::optim::SGD>([&](std::vector<at::Tensor>& p) {
      return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.5).weight_decay(weight_decay));
    }));
    const auto initial = make_model()->parameters();
    double moved = 0;
    for (size_t i = 0; i < initial.size(); ++i)
      moved = std::max(moved, (sgd_want.params[i] - initial[i]).norm().item<double>() / initial[i].norm().item<double>());
    ASSERT_GT(moved, 20 * reordered_bound(sgd)) << "the movement must dwarf the bound";
    expect_close(sgd_got, sgd_want, reordered_bound(sgd), sgd);
  }
}

TEST(EngineStage0, SgdNesterovMatchesTorch) {
  RunSpec r;
  r.optimizer = R"({"type": "SGD", "params": {"lr": 0.5, "momentum": 0.9, "nesterov": true,
                    "weight_decay": 0.001}})";
  auto got = run_engine(r);
  auto want = run_reference(r, torch_optimizer<torch::optim::SGD>([](std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::SGD>(
        p, torch::optim::SGDOptions(0.5).momentum(0.9).nesterov(true).weight_decay(0.001));
  }));
  expect_moved(got.params);
  expect_close(got, want, reordered_bound(r, 0.9), r);
}

TEST(EngineStage0, AdagradMatchesTorch) {
  RunSpec r;
  r.optimizer = R"({"type": "Adagrad", "params": {"lr": 0.01}})";
  auto got = run_engine(r);
  auto want = run_reference(r, torch_optimizer<torch::optim::Adagrad>([](std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::Adagrad>(p, torch::optim::AdagradOptions(0.01).eps(1e-10));
  }));
  expect_close(got, want, kAdaptiveBound, r);
}

TEST(EngineStage0, LionMatchesReferenceUpdate) {
  RunSpec r;
  r.optimizer = R"({"type": "Lion", "params": {"lr": 0.001, "betas": [0.9, 0.99], "weight_decay": 0.1}})";
  auto got = run_engine(r);
  auto want = run_reference(r, [](std::vector<at::Tensor>& params) -> StepFn {
    auto moments = std::make_shared<std::vector<at::Tensor>>();
    for (auto& p : params) moments->push_back(at::zeros_like(p));
    return [params, moments](int) {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        at::Tensor p = params[i], g = params[i].grad(), m = (*moments)[i];
        at::Tensor c = m * 0.9 + g * 0.1;
        p.mul_(1 - 0.001 * 0.1).sub_(at::sign(c) * 0.001);
        m.mul_(0.99).add_(g * 0.01);
      }
    };
  });
  expect_moved(got.params);
  expect_close(got, want, kAdaptiveBound, r);
}

TEST(EngineStage0, ClippingByGlobalNormMatchesTorch) {
  RunSpec r;
  r.clip = 0.05;
  r.optimizer = R"({"type": "SGD", "params": {"lr": 1.0}})";
  auto result = run_engine(r);
  for (double norm : result.grad_norms) EXPECT_GT(norm, r.clip) << "the clip must actually bind in this test";
  auto want = run_reference(r, torch_optimizer<torch::optim::SGD>([](std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(1.0));
  }));
  expect_close(result, want, reordered_bound(r), r);
}

TEST(EngineStage0, WarmupLRFollowsDeepSpeedSchedule) {
  // DeepSpeed (>= 0.15.3) writes warmup_min_lr into the optimizer when it builds the scheduler and steps the
  // scheduler after the optimizer: step 1 runs at the minimum, step k+1 at
  // min + (max - min) * log(k) / log(warmup_num_steps) (log warmup). The optimizer's own lr (0.2) is never used.
  RunSpec r;
  r.optimizer = R"({"type": "SGD", "params": {"lr": 0.2}})";
  r.scheduler = R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.01, "warmup_max_lr": 0.1,
                    "warmup_num_steps": 4}})";
  auto lr_after = [](int k) { return k >= 4 ? 0.1 : 0.01 + 0.09 * std::log(k) / std::log(4.0); };
  auto result = run_engine(r);
  // The schedule's formula in double on both sides, its operations grouped differently: a few double roundings.
  for (int k = 1; k <= r.steps; ++k)
    EXPECT_NEAR(result.lrs[k - 1].at(0), lr_after(k), tolerance::reordered(tolerance::kFp64Epsilon, 8, 1))
        << "after step " << k;
  auto want = run_reference(r, [&](std::vector<at::Tensor>& params) -> StepFn {
    auto opt = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.2));
    return [opt, lr_after](int step) {
      double lr = step == 0 ? 0.01 : lr_after(step);
      opt->param_groups()[0].options().set_lr(lr);
      opt->step();
    };
  });
  expect_close(result, want, reordered_bound(r), r);
}

TEST(EngineStage0, TwoRunsAreBitIdenticalAndRanksAgree) {
  RunSpec r;
  r.optimizer = R"({"type": "AdamW", "params": {"lr": 0.003}})";
  auto a = run_engine(r).params;
  auto b = run_engine(r).params;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
  // Every rank holds rank 0's parameters exactly.
  auto world = deepspeed::comm::get_world_group();
  for (size_t i = 0; i < a.size(); ++i) {
    at::Tensor mine = a[i].clone();
    at::Tensor root = a[i].clone();
    world.broadcast(root, 0);
    EXPECT_TRUE(at::equal(mine, root)) << "parameter " << i << " differs from rank 0";
  }
}

TEST(EngineStage0, BadUseIsRejectedClearly) {
  tiny_gpt::ensure_comm();
  GPT model = make_model();
  auto cfg = deepspeed::Config::from_string(R"({"train_batch_size": 3, "train_micro_batch_size_per_gpu": 3})");
  if (deepspeed::comm::get_world_size() > 1) {
    EXPECT_THROW(deepspeed::initialize(model, cfg), deepspeed::ConfigError);  // 3 != 3 * 1 * world
    return;
  }
  auto engine = deepspeed::initialize(model, cfg);
  at::Tensor x, y;
  forward_batch({0, 1, 2}, &x, &y);
  engine.backward(engine.forward(x, y));
  try {
    engine.step();
    FAIL() << "step without an optimizer must throw";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no optimizer"), std::string::npos) << e.what();
  }
  engine.eval();
  EXPECT_THROW(engine.backward(engine.forward(x, y)), deepspeed::Error);
}

}  // namespace

namespace {

TEST(EngineOptions, ClientOptimizerAndSchedulerDriveTheSteps) {
  RunSpec r;
  GPT model = make_model();
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.3));
  deepspeed::runtime::WarmupLRParams warmup;
  warmup.warmup_min_lr = 0.05;
  warmup.warmup_max_lr = 0.3;
  warmup.warmup_num_steps = 3;
  warmup.warmup_type = "linear";
  deepspeed::InitializeOptions options;
  options.optimizer = sgd;
  options.lr_scheduler = deepspeed::runtime::make_warmup_lr(warmup, {0.3});
  auto cfg = deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0})");
  auto engine = deepspeed::initialize(model, cfg, options);
  deepspeed::DataParallelSampler sampler(kSamples, r.micro, 1, engine.global_rank(), engine.world_size(), kDataSeed);
  EXPECT_EQ(engine.get_lr().at(0), 0.05) << "the scheduler's starting lr is in the optimizer before step 1";
  std::vector<double> lrs;
  EngineResult got;
  for (int step = 0; step < r.steps; ++step) {
    at::Tensor x, y;
    forward_batch(sampler.micro_batch(step, 0), &x, &y);
    engine.backward(engine.forward(x, y));
    engine.step();
    lrs.push_back(engine.get_lr().at(0));
    got.grad_norms.push_back(engine.get_global_grad_norm());
  }
  // Linear warmup: after step k the scheduler is at iteration k - 1, so lr = min + (max - min) * (k - 1) / 3,
  // capped at max (a few double roundings, grouped differently).
  for (int k = 1; k <= r.steps; ++k)
    EXPECT_NEAR(lrs[k - 1], k - 1 >= 3 ? 0.3 : 0.05 + 0.25 * (k - 1) / 3.0,
                tolerance::reordered(tolerance::kFp64Epsilon, 8, 1))
        << "after step " << k;
  for (const auto& p : model->parameters()) got.params.push_back(p.detach().clone());
  auto want = run_reference(r, [&](std::vector<at::Tensor>& params) -> StepFn {
    auto opt = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.3));
    return [opt, lrs](int step) {
      // Step 1 at warmup_min_lr: the scheduler's value before its first step, as in DeepSpeed >= 0.15.3.
      opt->param_groups()[0].options().set_lr(step == 0 ? 0.05 : lrs[step - 1]);
      opt->step();
    };
  });
  expect_close(got, want, reordered_bound(r), r);
}

// Two groups, one at lr 0: that group stays bit-identical, and the moving group follows torch's SGD with the same
// two groups (a group given the other's lr, or both given the config's, fails one of the two checks).
TEST(EngineOptions, ParamGroupsCarryTheirOwnLearningRate) {
  RunSpec r;
  GPT model = make_model();
  std::vector<at::Tensor> frozen_lr, rest;
  std::vector<bool> is_frozen;  // by position in model->parameters()
  for (const auto& item : model->named_parameters()) {
    const bool frozen = item.key().find("wte") != std::string::npos;
    (frozen ? frozen_lr : rest).push_back(item.value());
    is_frozen.push_back(frozen);
  }
  ASSERT_FALSE(frozen_lr.empty());
  ASSERT_FALSE(rest.empty());
  at::Tensor wte_before = frozen_lr[0].detach().clone();
  deepspeed::InitializeOptions options;
  options.param_groups.push_back({frozen_lr, 0.0, std::nullopt});
  options.param_groups.push_back({rest, std::nullopt, std::nullopt});
  auto cfg = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0,
          "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})");
  auto engine = deepspeed::initialize(model, cfg, options);
  EXPECT_EQ(engine.get_lr(), (std::vector<double>{0.0, 0.5}));
  deepspeed::DataParallelSampler sampler(kSamples, r.micro, 1, engine.global_rank(), engine.world_size(), kDataSeed);
  EngineResult got;
  for (int step = 0; step < r.steps; ++step) {
    at::Tensor x, y;
    forward_batch(sampler.micro_batch(step, 0), &x, &y);
    engine.backward(engine.forward(x, y));
    engine.step();
    got.grad_norms.push_back(engine.get_global_grad_norm());
  }
  EXPECT_TRUE(at::equal(frozen_lr[0], wte_before)) << "lr 0 group must not move";
  for (const auto& p : model->parameters()) got.params.push_back(p.detach().clone());
  auto want = run_reference(r, [&](std::vector<at::Tensor>& params) -> StepFn {
    std::vector<at::Tensor> zero_group, lr_group;
    for (size_t i = 0; i < params.size(); ++i) (is_frozen[i] ? zero_group : lr_group).push_back(params[i]);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(zero_group, std::make_unique<torch::optim::SGDOptions>(0.0));
    groups.emplace_back(lr_group, std::make_unique<torch::optim::SGDOptions>(0.5));
    auto opt = std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.5));
    return [opt](int) { opt->step(); };
  });
  expect_moved(got.params);
  expect_close(got, want, reordered_bound(r), r);
}

// The 1-bit optimizers parse (older DeepSpeed configs name them) but are refused by name at initialize: DeepSpeed
// 0.19 removed them.
TEST(EngineOptions, OneBitOptimizersAreRefusedByName) {
  for (const char* type : {"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}) {
    GPT model = make_model();
    auto cfg = deepspeed::Config::from_string(std::string(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": )") +
                                              R"({"type": ")" + type + R"(", "params": {"lr": 0.001}}})");
    try {
      deepspeed::initialize(model, cfg);
      FAIL() << type << ": expected a ConfigError";
    } catch (const deepspeed::ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("optimizer.type: '", 0), 0u) << msg;
      EXPECT_NE(msg.find("DeepSpeed itself removed its 1-bit optimizers"), std::string::npos) << msg;
    }
  }
}

TEST(EngineOptions, ClientOptimizerWithConfigOptimizerIsAnError) {
  GPT model = make_model();
  deepspeed::InitializeOptions options;
  options.optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  auto cfg = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0,
          "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})");
  try {
    deepspeed::initialize(model, cfg, options);
    FAIL() << "expected a ConfigError";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer: the config names an optimizer"), std::string::npos) << e.what();
  }
}

// hpZ's secondary partitions need the data-parallel group to be the whole world: a caller's model-parallel group of
// more than one rank makes it smaller, and initialize refuses by name before the model changes.
TEST(EngineOptions, HierarchicalPartitionsInsideACallersLayoutAreRefused) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  if (deepspeed::comm::get_world_size() < 2) GTEST_SKIP() << "needs a model-parallel group of two ranks";
  GPT model = make_model();
  deepspeed::InitializeOptions options;
  options.model_parallel_group = deepspeed::comm::get_world_group();
  auto cfg = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
          "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}})");
  try {
    deepspeed::initialize(model, cfg, options);
    FAIL() << "expected a ConfigError";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_hpz_partition_size: secondary partitions need the data-parallel group "
                                         "to be the whole world"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
