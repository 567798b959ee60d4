// The kernels against double-precision reference loops (Lion, Adam without bias correction), and
// the promises of cpu_optimizer.h: bit-identical results across SIMD variants and thread counts,
// clear errors.
#include "deepspeed/ops/cpu_optimizer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "test_util.h"
#include "tolerance.h"

namespace deepspeed::ops {
namespace {

using testing::level_param_name;
using testing::max_scaled_diff;

constexpr int kKernelSteps = 21;
// Float against double over 21 steps: each step rounds about 3 times (half an epsilon each, so 1.5
// epsilons' worth), and the roundings add up over the steps: 21 * 1.5 * 1.2e-7 = 3.8e-6 from the
// exact value; any real bug is far larger.
const double kKernelTolerance = tolerance::reordered(tolerance::kFp32Epsilon, 2, kKernelSteps);

class DoubleReferenceTest : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override { at::manual_seed(99); }
};

// Lion's update flips with sign(c), so float and double must not disagree on that sign: each
// element's gradient keeps one sign with |g| >= 0.5 (both signs occur across elements), which keeps
// |c| far from 0.
TEST_P(DoubleReferenceTest, LionMatchesDoubleLoop) {
  LionParams hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.9;
  hp.beta2 = 0.99;
  hp.weight_decay = 0.1;
  for (int64_t n : testing::sizes_for(GetParam(), kTileElements)) {
    SCOPED_TRACE("numel=" + std::to_string(n));
    const at::Tensor signs = at::randint(0, 2, {n}, at::kFloat) * 2 - 1;
    at::Tensor param = at::randn({n}) * 3;
    at::Tensor exp_avg = at::full({n}, NAN);
    std::vector<double> p(param.data_ptr<float>(), param.data_ptr<float>() + n);
    std::vector<double> m(n, 0.0);
    for (int step = 1; step <= kKernelSteps; ++step) {
      const at::Tensor grad = signs * (at::rand({n}) + 0.5);
      lion_step(param, grad, exp_avg, hp, step, GetParam());
      const float* g = grad.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        const double c = hp.beta1 * m[i] + (1 - hp.beta1) * g[i];
        const double sign = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
        p[i] = p[i] * (1 - hp.lr * hp.weight_decay) - hp.lr * sign;
        m[i] = hp.beta2 * m[i] + (1 - hp.beta2) * g[i];
      }
    }
    const auto as_tensor = [n](std::vector<double>& v) {
      return at::from_blob(v.data(), {n}, at::kDouble).clone();
    };
    EXPECT_LE(max_scaled_diff(param, as_tensor(p)), kKernelTolerance);
    EXPECT_LE(max_scaled_diff(exp_avg, as_tensor(m)), kKernelTolerance);
  }
}

TEST_P(DoubleReferenceTest, LionZeroGradientOnZeroMomentumOnlyDecays) {
  LionParams hp;
  hp.lr = 0.5;
  hp.weight_decay = 0.2;
  at::Tensor param = at::full({9}, 2.0f);
  at::Tensor exp_avg = at::full({9}, NAN);
  lion_step(param, at::zeros({9}), exp_avg, hp, 1, GetParam());
  EXPECT_TRUE(at::equal(param, at::full({9}, 2.0f * (1.0f - 0.5f * 0.2f))));
  EXPECT_TRUE(at::equal(exp_avg, at::zeros({9})));
}

TEST_P(DoubleReferenceTest, AdamWithoutBiasCorrectionMatchesDoubleLoop) {
  AdamParams hp;
  hp.lr = 1e-2;
  hp.weight_decay = 0.05;
  hp.adamw_mode = true;
  hp.bias_correction = false;
  for (int64_t n : testing::sizes_for(GetParam(), kTileElements)) {
    SCOPED_TRACE("numel=" + std::to_string(n));
    at::Tensor param = at::randn({n});
    at::Tensor exp_avg = at::full({n}, NAN), exp_avg_sq = at::full({n}, NAN);
    std::vector<double> p(param.data_ptr<float>(), param.data_ptr<float>() + n);
    std::vector<double> m(n, 0.0), v(n, 0.0);
    for (int step = 1; step <= kKernelSteps; ++step) {
      const at::Tensor grad = at::randn({n});
      adam_step(param, grad, exp_avg, exp_avg_sq, hp, step, GetParam());
      const float* g = grad.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i) {
        m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g[i];
        v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * g[i] * g[i];
        p[i] = p[i] * (1 - hp.lr * hp.weight_decay) - hp.lr * m[i] / (std::sqrt(v[i]) + hp.eps);
      }
    }
    EXPECT_LE(max_scaled_diff(param, at::from_blob(p.data(), {n}, at::kDouble)), kKernelTolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(AllSimdLevels, DoubleReferenceTest,
                         ::testing::ValuesIn(supported_simd_levels()), level_param_name);

// One optimizer over (param, state...) run for a few steps with a given SIMD level; returns all
// tensors.
using StepFn = std::function<void(std::vector<at::Tensor>&, const at::Tensor& grad, int64_t step,
                                  SimdLevel level)>;

struct NamedStep {
  const char* name;
  int state_tensors;
  StepFn fn;
};

std::vector<NamedStep> all_optimizers() {
  return {
      {"adam", 2,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, SimdLevel level) {
         AdamParams hp;
         hp.weight_decay = 0.01;
         adam_step(t[0], g, t[1], t[2], hp, step, level);
       }},
      {"adam_l2", 2,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, SimdLevel level) {
         AdamParams hp;
         hp.weight_decay = 0.01;
         hp.adamw_mode = false;
         adam_step(t[0], g, t[1], t[2], hp, step, level);
       }},
      {"sgd", 0,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, SimdLevel level) {
         SgdParams hp;
         hp.weight_decay = 0.01;
         sgd_step(t[0], g, at::Tensor(), hp, step, level);
       }},
      {"sgd_nesterov", 1,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, SimdLevel level) {
         SgdParams hp;
         hp.momentum = 0.9;
         hp.nesterov = true;
         sgd_step(t[0], g, t[1], hp, step, level);
       }},
      {"adagrad", 1,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, SimdLevel level) {
         AdagradParams hp;
         hp.initial_accumulator_value = 0.1;
         adagrad_step(t[0], g, t[1], hp, step, level);
       }},
      {"lion", 1,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, SimdLevel level) {
         LionParams hp;
         hp.weight_decay = 0.1;
         lion_step(t[0], g, t[1], hp, step, level);
       }},
  };
}

std::vector<at::Tensor> run_steps(const NamedStep& opt, int64_t n, SimdLevel level) {
  at::manual_seed(7);
  std::vector<at::Tensor> tensors = {at::randn({n})};
  for (int i = 0; i < opt.state_tensors; ++i) tensors.push_back(at::empty({n}));
  for (int64_t step = 1; step <= 3; ++step) opt.fn(tensors, at::randn({n}), step, level);
  return tensors;
}

void expect_bit_identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i]))
        << "tensor " << i << " max diff " << (a[i] - b[i]).abs().max().item<float>();
  }
}

TEST(CpuOptimizerTest, AllSimdLevelsAreBitIdentical) {
  for (const NamedStep& opt : all_optimizers()) {
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{kTileElements * 2 + 17}}) {
      SCOPED_TRACE(std::string(opt.name) + " numel=" + std::to_string(n));
      const auto scalar = run_steps(opt, n, SimdLevel::kScalar);
      for (SimdLevel level : supported_simd_levels()) {
        SCOPED_TRACE(simd_level_name(level));
        expect_bit_identical(run_steps(opt, n, level), scalar);
      }
    }
  }
}

TEST(CpuOptimizerTest, ResultsDoNotDependOnThreadCount) {
  const int saved = at::get_num_threads();
  for (const NamedStep& opt : all_optimizers()) {
    SCOPED_TRACE(opt.name);
    const int64_t n = kTileElements * 5 + 123;
    at::set_num_threads(1);
    const auto one = run_steps(opt, n, SimdLevel::kAuto);
    at::set_num_threads(3);
    ASSERT_EQ(at::get_num_threads(), 3);
    const auto three = run_steps(opt, n, SimdLevel::kAuto);
    expect_bit_identical(one, three);
  }
  at::set_num_threads(saved);
}

// Expects `fn` to throw deepspeed::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
    }
  }
}

TEST(CpuOptimizerTest, BadTensorsThrowNamingTheArgument) {
  const at::Tensor p = at::zeros({8}), g = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
  const AdamParams hp;
  expect_error([&] { adam_step(p.to(at::kDouble), g, m, v, hp, 1); },
               {"adam_step", "param", "Double"});
  expect_error([&] { adam_step(p, g.to(at::kHalf), m, v, hp, 1); }, {"grad", "Half"});
  expect_error([&] { adam_step(p, g, at::zeros({9}), v, hp, 1); }, {"exp_avg", "9", "8"});
  expect_error([&] { adam_step(p, g, m, at::zeros({16}).slice(0, 0, 16, 2), hp, 1); },
               {"exp_avg_sq", "contiguous=false"});
  expect_error([&] { adam_step(p, g, m, at::Tensor(), hp, 1); }, {"exp_avg_sq", "undefined"});
  expect_error([&] { adam_step(p, g, p, v, hp, 1); }, {"param", "exp_avg", "overlap"});
  expect_error([&] { adam_step(p, g, m, v, hp, 0); }, {"step", "0"});
  SgdParams momentum;
  momentum.momentum = 0.9;
  expect_error([&] { sgd_step(p, g, at::Tensor(), momentum, 1); }, {"momentum_buffer"});
  expect_error([&] { adagrad_step(p, g, at::zeros({4}), AdagradParams(), 1); }, {"exp_avg_sq"});
  expect_error([&] { lion_step(p, at::zeros({2, 4}).t(), m, LionParams(), 1); }, {"grad"});
}

TEST(CpuOptimizerTest, BadHyperParametersThrowNamingTheValue) {
  const at::Tensor p = at::zeros({8}), g = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
  const auto adam = [&](auto mutate) {
    AdamParams hp;
    mutate(hp);
    return [=] { adam_step(p, g, m, v, hp, 1); };
  };
  expect_error(adam([](AdamParams& hp) { hp.lr = -1; }), {"lr", "-1"});
  expect_error(adam([](AdamParams& hp) { hp.beta1 = 1.0; }), {"beta1", "1"});
  expect_error(adam([](AdamParams& hp) { hp.beta2 = -0.5; }), {"beta2", "-0.5"});
  expect_error(adam([](AdamParams& hp) { hp.eps = 0; }), {"eps"});
  expect_error(adam([](AdamParams& hp) { hp.weight_decay = NAN; }), {"weight_decay"});
  expect_error(adam([](AdamParams& hp) { hp.amsgrad = true; }), {"amsgrad"});
  SgdParams nesterov;
  nesterov.nesterov = true;
  expect_error([&] { sgd_step(p, g, m, nesterov, 1); }, {"nesterov", "momentum=0"});
  AdagradParams adagrad;
  adagrad.lr_decay = -0.1;
  expect_error([&] { adagrad_step(p, g, v, adagrad, 1); }, {"lr_decay", "-0.1"});
  LionParams lion;
  lion.beta2 = 1.5;
  expect_error([&] { lion_step(p, g, m, lion, 1); }, {"beta2", "1.5"});
}

TEST(CpuOptimizerTest, EmptyTensorsAreANoOp) {
  const at::Tensor e = at::empty({0});
  EXPECT_NO_THROW(adam_step(e, e.clone(), e.clone(), e.clone(), AdamParams(), 1));
  EXPECT_NO_THROW(sgd_step(e, e.clone(), at::Tensor(), SgdParams(), 1));
}

}  // namespace
}  // namespace deepspeed::ops
