// The fused kernels against torch::optim (Adam, AdamW, SGD, Adagrad) for every SIMD variant this
// CPU has: 20+ steps on random tensors of odd lengths, parameters and optimizer state within an
// epsilon per step (relative where |value| > 1; tests/common/tolerance.h). Our state starts as NaN to prove step 1 ignores it, as
// cpu_optimizer.h promises.
//
// Where torch differs in rounding: its vector kernels compute `a + alpha * b` (add with alpha, used
// for L2 weight decay and SGD momentum) with one FMA, while our kernels round the product first (no
// contraction, so that every SIMD variant agrees bit for bit). Those 1-ulp differences are harmless
// except where Adam divides by sqrt(v) + eps with |g| near eps, which amplifies them; the L2 test
// therefore uses a power-of-two weight decay, which makes wd * p exact so both roundings agree;
// likewise the dampening test uses 0.5 (the momentum buffer sums terms of |g| ~ 4, where one ulp is
// already 5e-7), and the SGD tests a moderate lr so the 1-ulp differences of the update do not add
// up to 1e-6 over 21 steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "deepspeed/ops/cpu_optimizer.h"
#include "test_util.h"
#include "tolerance.h"

namespace deepspeed::ops {
namespace {

using testing::level_param_name;
using testing::max_scaled_diff;

constexpr int kSteps = 21;
// Both sides compute each step's update in float with the same formula; they differ by one rounding where torch
// fuses a multiply-add (see above), i.e. up to an epsilon per step that can reach the parameters, over kSteps:
// reordered(epsilon, 1 operation, 21 steps) = 2.5e-6. (Measured: under 1e-6 at AVX2 and AVX-512.)
const double kTolerance = tolerance::reordered(tolerance::kFp32Epsilon, 1, kSteps);

at::Tensor nan_state(int64_t n) { return at::full({n}, NAN, at::kFloat); }

// The torch optimizer's state entry for `param`.
template <typename State>
State& torch_state(torch::optim::Optimizer& opt, const torch::Tensor& param) {
  return static_cast<State&>(*opt.state().at(param.unsafeGetTensorImpl()));
}

// Steps `opt` (over `ref`) and `ours` in lockstep on the same random gradients, checking the
// parameters after every step.
template <typename Ours>
void run_lockstep(int64_t n, torch::optim::Optimizer& opt, const torch::Tensor& ref,
                  const at::Tensor& param, Ours ours) {
  for (int step = 1; step <= kSteps; ++step) {
    const at::Tensor grad = torch::randn({n});
    ref.mutable_grad() = grad.clone();
    opt.step();
    ours(grad, step);
    ASSERT_LE(max_scaled_diff(param, ref.detach()), kTolerance) << "param differs at step " << step;
  }
}

class TorchReferenceTest : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override { torch::manual_seed(1234); }

  void check_adam(bool adamw_mode, double weight_decay) {
    AdamParams hp;
    hp.lr = 1e-2;
    hp.beta1 = 0.8;
    hp.beta2 = 0.99;
    hp.eps = 1e-6;
    hp.weight_decay = weight_decay;
    hp.adamw_mode = adamw_mode;
    for (int64_t n : testing::sizes_for(GetParam(), kTileElements)) {
      SCOPED_TRACE("numel=" + std::to_string(n));
      const at::Tensor param = torch::randn({n}) * 2;
      const torch::Tensor ref = param.clone().requires_grad_(true);
      at::Tensor exp_avg = nan_state(n), exp_avg_sq = nan_state(n);
      auto ours = [&](const at::Tensor& grad, int step) {
        adam_step(param, grad, exp_avg, exp_avg_sq, hp, step, GetParam());
      };
      if (adamw_mode) {
        torch::optim::AdamW opt({ref}, torch::optim::AdamWOptions(hp.lr)
                                           .betas({hp.beta1, hp.beta2})
                                           .eps(hp.eps)
                                           .weight_decay(weight_decay));
        run_lockstep(n, opt, ref, param, ours);
        if (HasFatalFailure()) return;
        auto& st = torch_state<torch::optim::AdamWParamState>(opt, ref);
        EXPECT_LE(max_scaled_diff(exp_avg, st.exp_avg()), kTolerance);
        EXPECT_LE(max_scaled_diff(exp_avg_sq, st.exp_avg_sq()), kTolerance);
      } else {
        torch::optim::Adam opt({ref}, torch::optim::AdamOptions(hp.lr)
                                          .betas({hp.beta1, hp.beta2})
                                          .eps(hp.eps)
                                          .weight_decay(weight_decay));
        run_lockstep(n, opt, ref, param, ours);
        if (HasFatalFailure()) return;
        auto& st = torch_state<torch::optim::AdamParamState>(opt, ref);
        EXPECT_LE(max_scaled_diff(exp_avg, st.exp_avg()), kTolerance);
        EXPECT_LE(max_scaled_diff(exp_avg_sq, st.exp_avg_sq()), kTolerance);
      }
    }
  }

  void check_sgd(double momentum, double dampening, bool nesterov, double weight_decay) {
    SgdParams hp;
    hp.lr = 0.01;
    hp.momentum = momentum;
    hp.dampening = dampening;
    hp.nesterov = nesterov;
    hp.weight_decay = weight_decay;
    for (int64_t n : testing::sizes_for(GetParam(), kTileElements)) {
      SCOPED_TRACE("numel=" + std::to_string(n));
      const at::Tensor param = torch::randn({n}) * 2;
      const torch::Tensor ref = param.clone().requires_grad_(true);
      at::Tensor buf = momentum != 0.0 ? nan_state(n) : at::Tensor();
      torch::optim::SGD opt({ref}, torch::optim::SGDOptions(hp.lr)
                                       .momentum(momentum)
                                       .dampening(dampening)
                                       .nesterov(nesterov)
                                       .weight_decay(weight_decay));
      run_lockstep(n, opt, ref, param, [&](const at::Tensor& grad, int step) {
        sgd_step(param, grad, buf, hp, step, GetParam());
      });
      if (HasFatalFailure()) return;
      if (momentum != 0.0) {
        auto& st = torch_state<torch::optim::SGDParamState>(opt, ref);
        EXPECT_LE(max_scaled_diff(buf, st.momentum_buffer()), kTolerance);
      }
    }
  }

  void check_adagrad(double lr_decay, double weight_decay, double initial_accumulator_value) {
    AdagradParams hp;
    hp.lr = 0.05;
    hp.lr_decay = lr_decay;
    hp.weight_decay = weight_decay;
    hp.initial_accumulator_value = initial_accumulator_value;
    hp.eps = 1e-10;
    for (int64_t n : testing::sizes_for(GetParam(), kTileElements)) {
      SCOPED_TRACE("numel=" + std::to_string(n));
      const at::Tensor param = torch::randn({n}) * 2;
      const torch::Tensor ref = param.clone().requires_grad_(true);
      at::Tensor sum = nan_state(n);
      torch::optim::Adagrad opt({ref}, torch::optim::AdagradOptions(hp.lr)
                                           .lr_decay(lr_decay)
                                           .weight_decay(weight_decay)
                                           .initial_accumulator_value(initial_accumulator_value)
                                           .eps(hp.eps));
      run_lockstep(n, opt, ref, param, [&](const at::Tensor& grad, int step) {
        adagrad_step(param, grad, sum, hp, step, GetParam());
      });
      if (HasFatalFailure()) return;
      auto& st = torch_state<torch::optim::AdagradParamState>(opt, ref);
      EXPECT_LE(max_scaled_diff(sum, st.sum()), kTolerance);
    }
  }
};

TEST_P(TorchReferenceTest, AdamMatchesTorchAdam) { check_adam(false, 0.0); }
TEST_P(TorchReferenceTest, AdamL2MatchesTorchAdamWeightDecay) { check_adam(false, 0.125); }
TEST_P(TorchReferenceTest, AdamWMatchesTorchAdamW) { check_adam(true, 0.1); }
TEST_P(TorchReferenceTest, SgdPlainMatchesTorch) { check_sgd(0.0, 0.0, false, 0.0); }
TEST_P(TorchReferenceTest, SgdWeightDecayMatchesTorch) { check_sgd(0.0, 0.0, false, 0.01); }
TEST_P(TorchReferenceTest, SgdMomentumDampeningMatchesTorch) { check_sgd(0.9, 0.5, false, 0.01); }
TEST_P(TorchReferenceTest, SgdNesterovMatchesTorch) { check_sgd(0.9, 0.0, true, 0.01); }
TEST_P(TorchReferenceTest, AdagradMatchesTorch) { check_adagrad(0.0, 0.0, 0.0); }
TEST_P(TorchReferenceTest, AdagradDecayAndInitialValueMatchTorch) {
  check_adagrad(0.01, 0.01, 0.1);
}

INSTANTIATE_TEST_SUITE_P(AllSimdLevels, TorchReferenceTest,
                         ::testing::ValuesIn(supported_simd_levels()), level_param_name);

}  // namespace
}  // namespace deepspeed::ops
