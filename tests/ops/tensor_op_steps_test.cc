// The tensor-op optimizer steps (the path a GPU's masters take) against the fused CPU kernels: same scalars, same
// operation order, one rounding per operation. Over five steps (step 1 ignores the incoming state: both paths
// start from different garbage in it), with and without the bf16 copy-back:
// - optimizer states and every result without a square root agree bit for bit (SGD, Lion, Adam's m and v,
//   Adagrad's sum): a reordered operation, a fused multiply-add or a state not reset at step 1 shows;
// - parameters of Adam and Adagrad agree to the square root's rounding: ATen's vectorized CPU sqrt is within one
//   ulp, not correctly rounded like the kernels' (a GPU's sqrtf is). One ulp in the denominator moves an update u
//   by at most 2^-22 |u|, and the subtraction rounds once more: per step |dp| <= ulp(p) + 2^-22 |u|, |u| <= lr
//   (Adam's m/sqrt(v) is at most 1/sqrt(1-b2) ~ 31.6 times lr; Adagrad's g/sqrt(sum) at most 1 times lr). The test
//   allows five steps of 2 ulp(p) + 2^-22 * 32 lr, far below what a missed bias correction or decay would move.
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "deepspeed/ops.h"
#include "ops/cuda_steps.h"
#include "ops/tensor_op_steps.h"

namespace deepspeed::ops {
namespace {

// One optimizer as both paths: `kernel` through the public step (CPU kernels), `tensor_ops` straight through the
// tensor-op step with the same step's scalars.
struct BothPaths {
  const char* name;
  int states;
  double sqrt_lr;  // the lr of optimizers whose update divides by a square root; 0 for the others
  std::function<void(std::vector<at::Tensor>&, const at::Tensor&, int64_t, const at::Tensor&)> kernel;
  std::function<void(std::vector<at::Tensor>&, const at::Tensor&, int64_t, const at::Tensor&)> tensor_ops;
};

std::vector<BothPaths> optimizers() {
  AdamParams adamw;
  adamw.lr = 3e-3;
  adamw.weight_decay = 0.05;
  AdamParams adam_l2 = adamw;
  adam_l2.adamw_mode = false;
  AdamParams no_bias = adamw;
  no_bias.bias_correction = false;
  SgdParams sgd;
  sgd.lr = 0.05;
  sgd.weight_decay = 0.01;
  SgdParams momentum = sgd;
  momentum.momentum = 0.9;
  momentum.dampening = 0.1;
  SgdParams nesterov = sgd;
  nesterov.momentum = 0.8;
  nesterov.nesterov = true;
  AdagradParams adagrad;
  adagrad.lr_decay = 0.01;
  adagrad.weight_decay = 0.02;
  adagrad.initial_accumulator_value = 0.1;
  LionParams lion;
  lion.weight_decay = 0.1;
  auto adam_case = [](const char* name, AdamParams hp) {
    return BothPaths{name, 2, hp.lr,
                     [hp](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
                       adam_step(t[0], g, t[1], t[2], hp, step, SimdLevel::kScalar, c);
                     },
                     [hp](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
                       detail::adam_tensor_ops(t[0], g, t[1], t[2], detail::adam_scalars(hp, step), c);
                     }};
  };
  auto sgd_case = [](const char* name, SgdParams hp) {
    return BothPaths{name, hp.momentum != 0.0 ? 1 : 0, 0.0,
                     [hp](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
                       sgd_step(t[0], g, t.size() > 1 ? t[1] : at::Tensor(), hp, step, SimdLevel::kScalar, c);
                     },
                     [hp](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
                       detail::sgd_tensor_ops(t[0], g, t.size() > 1 ? t[1] : at::Tensor(),
                                              detail::sgd_scalars(hp, step), c);
                     }};
  };
  return {
      adam_case("adamw", adamw),
      adam_case("adam_l2", adam_l2),
      adam_case("adam_no_bias_correction", no_bias),
      sgd_case("sgd", sgd),
      sgd_case("sgd_momentum", momentum),
      sgd_case("sgd_nesterov", nesterov),
      {"adagrad", 1, adagrad.lr,
       [adagrad](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
         adagrad_step(t[0], g, t[1], adagrad, step, SimdLevel::kScalar, c);
       },
       [adagrad](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
         detail::adagrad_tensor_ops(t[0], g, t[1], detail::adagrad_scalars(adagrad, step), c);
       }},
      {"lion", 1, 0.0,
       [lion](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
         lion_step(t[0], g, t[1], lion, step, SimdLevel::kScalar, c);
       },
       [lion](auto& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
         detail::lion_tensor_ops(t[0], g, t[1], detail::lion_scalars(lion, step), c);
       }},
  };
}

// Five steps from the same start; state tensors begin as garbage (different on the two paths) to show step 1
// ignores them. Gradients include zeros and values far apart in magnitude.
std::vector<at::Tensor> run(const BothPaths& opt, bool tensor_ops, bool with_copy, int garbage_seed,
                            at::ScalarType copy_dtype = at::kBFloat16) {
  const int64_t n = 4099;
  at::manual_seed(11);
  std::vector<at::Tensor> t = {at::randn({n})};
  at::manual_seed(garbage_seed);
  for (int i = 0; i < opt.states; ++i) t.push_back(at::randn({n}) * 1e3);
  at::Tensor copy = with_copy ? at::empty({n}, copy_dtype) : at::Tensor();
  at::manual_seed(12);
  for (int64_t step = 1; step <= 5; ++step) {
    at::Tensor g = at::randn({n}) * at::pow(10.0, at::randint(-4, 3, {n}));
    g.narrow(0, 0, 64).zero_();
    (tensor_ops ? opt.tensor_ops : opt.kernel)(t, g, step, copy);
  }
  if (with_copy) t.push_back(copy);
  return t;
}

TEST(TensorOpSteps, MatchTheKernels) {
  for (const BothPaths& opt : optimizers()) {
    for (bool with_copy : {false, true}) {
      SCOPED_TRACE(std::string(opt.name) + (with_copy ? " with bf16 copy-back" : ""));
      const auto kernel = run(opt, /*tensor_ops=*/false, with_copy, 1);
      const auto tensor_ops = run(opt, /*tensor_ops=*/true, with_copy, 2);
      ASSERT_EQ(kernel.size(), tensor_ops.size());
      for (size_t i = 0; i < kernel.size(); ++i) {
        const bool param_like = i == 0 || (with_copy && i + 1 == kernel.size());
        if (opt.sqrt_lr == 0.0 || !param_like) {
          EXPECT_TRUE(at::equal(kernel[i], tensor_ops[i]))
              << "tensor " << i << " max diff "
              << (kernel[i].to(at::kFloat) - tensor_ops[i].to(at::kFloat)).abs().max().item<float>();
          continue;
        }
        const at::Tensor a = kernel[i].to(at::kDouble), b = tensor_ops[i].to(at::kDouble);
        // ulp(p) <= 2^-23 |p| in fp32; the bf16 copy may round the two fp32 values to neighbouring bf16 values
        // (one bf16 ulp, <= 2^-8 |p|).
        at::Tensor bound = 5.0 * (2.0 * std::ldexp(1.0, -23) * a.abs() + std::ldexp(1.0, -22) * 32.0 * opt.sqrt_lr);
        if (i != 0) bound = bound + std::ldexp(1.0, -8) * a.abs();
        EXPECT_TRUE(((a - b).abs() <= bound).all().item<bool>())
            << "tensor " << i << " max diff " << (a - b).abs().max().item<double>();
      }
    }
  }
}

// Whether LibTorch sees a GPU. The GPU runner (tests/gpu/run_on_gpu.sh, DS_REQUIRE_GPU=1) has found one with
// nvidia-smi, so there a LibTorch that sees none fails the test instead of letting it skip.
bool gpu_visible() {
  const bool visible = at::detail::getCUDAHooks().getNumGPUs() > 0;
  if (!visible && std::getenv("DS_REQUIRE_GPU") != nullptr) {
    ADD_FAILURE() << "DS_REQUIRE_GPU is set (the GPU runner saw a GPU) but LibTorch sees none";
  }
  return visible;
}

// On a GPU (the path's purpose) sqrtf is correctly rounded, so every tensor agrees with the CPU kernels bit for
// bit. Skipped where no GPU is visible (run by scripts/gpu_check.sh on the GPU machine).
TEST(TensorOpSteps, OnTheGpuMatchTheKernelsBitForBit) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
  const c10::Device cuda(c10::kCUDA, 0);
  for (const BothPaths& opt : optimizers()) {
    SCOPED_TRACE(opt.name);
    const auto kernel = run(opt, /*tensor_ops=*/false, /*with_copy=*/true, 1);
    // The same run with every tensor on the GPU: the wrapper moves inputs there and results back.
    BothPaths on_gpu = opt;
    on_gpu.tensor_ops = [&](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
      std::vector<at::Tensor> d;
      for (const auto& x : t) d.push_back(x.to(cuda));
      at::Tensor dc = c.defined() ? c.to(cuda) : at::Tensor();
      opt.tensor_ops(d, g.to(cuda), step, dc);
      for (size_t i = 0; i < t.size(); ++i) t[i].copy_(d[i]);
      if (c.defined()) c.copy_(dc);
    };
    const auto gpu = run(on_gpu, /*tensor_ops=*/true, /*with_copy=*/true, 2);
    ASSERT_EQ(kernel.size(), gpu.size());
    for (size_t i = 0; i < kernel.size(); ++i) EXPECT_TRUE(at::equal(kernel[i], gpu[i])) << "tensor " << i;
  }
}

// Equal bit patterns (at::equal compares values: +0 equals -0).
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto bits = a.element_size() == 4 ? at::kInt : at::kShort;
  return at::equal(a.cpu().view(bits), b.cpu().view(bits));
}

// The public Adam step on CUDA tensors takes the fused CUDA kernel (cuda_kernels.cu): the same arithmetic in one
// pass, so every tensor (parameter, both moments, the bf16 or fp16 copy) equals the CPU kernels' bit for bit. A
// contracted multiply-add, a reordered product or a copy rounded another way shows. Needs a GPU and a build that
// found nvcc; scripts/gpu_check.sh runs it.
TEST(FusedCudaSteps, AdamMatchesTheKernelsBitForBit) {
  if (!gpu_visible()) GTEST_SKIP() << "no GPU visible";
  ASSERT_TRUE(detail::fused_cuda_steps_enabled())
      << "this build has no fused CUDA steps (configured with DS_CUDA_KERNELS=OFF) or DS_CUDA_FUSED_STEPS=0 is set";
  const c10::Device cuda(c10::kCUDA, 0);
  for (const BothPaths& opt : optimizers()) {
    if (std::string(opt.name).rfind("adam", 0) != 0) continue;
    for (const auto copy_dtype : {at::kBFloat16, at::kHalf}) {
      for (bool with_copy : {false, true}) {
        SCOPED_TRACE(std::string(opt.name) + (with_copy ? std::string(" with copy ") + c10::toString(copy_dtype)
                                                        : std::string()));
        const auto kernel = run(opt, /*tensor_ops=*/false, with_copy, 1, copy_dtype);
        BothPaths on_gpu = opt;
        on_gpu.kernel = [&](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t step, const at::Tensor& c) {
          std::vector<at::Tensor> d;
          for (const auto& x : t) d.push_back(x.to(cuda));
          at::Tensor dc = c.defined() ? c.to(cuda) : at::Tensor();
          opt.kernel(d, g.to(cuda), step, dc);  // adam_step on CUDA tensors: the fused kernel
          for (size_t i = 0; i < t.size(); ++i) t[i].copy_(d[i]);
          if (c.defined()) c.copy_(dc);
        };
        const auto gpu = run(on_gpu, /*tensor_ops=*/false, with_copy, 2, copy_dtype);
        ASSERT_EQ(kernel.size(), gpu.size());
        for (size_t i = 0; i < kernel.size(); ++i) {
          EXPECT_TRUE(same_bits(kernel[i], gpu[i]))
              << "tensor " << i << " max diff "
              << (kernel[i].to(at::kFloat) - gpu[i].to(at::kFloat)).abs().max().item<float>();
        }
      }
    }
  }
  // More elements than one grid covers (65536 blocks of 256 threads): the grid-stride loop's second round.
  const int64_t n = int64_t{65536} * 256 + 4099;
  at::manual_seed(13);
  const at::Tensor p0 = at::randn({n}), g = at::randn({n}), m0 = at::randn({n}), v0 = at::rand({n});
  AdamParams hp;
  hp.weight_decay = 0.01;
  std::vector<at::Tensor> cpu = {p0.clone(), m0.clone(), v0.clone()};
  adam_step(cpu[0], g, cpu[1], cpu[2], hp, /*step=*/3, SimdLevel::kScalar);
  std::vector<at::Tensor> dev = {p0.to(cuda), m0.to(cuda), v0.to(cuda)};
  adam_step(dev[0], g.to(cuda), dev[1], dev[2], hp, /*step=*/3, SimdLevel::kScalar);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(same_bits(cpu[i], dev[i].cpu())) << "large tensor " << i;
}

TEST(TensorOpSteps, ACopyBackOnAnotherDeviceOrDtypeIsRefused) {
  const at::Tensor p = at::zeros({8}), g = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
  const auto s = detail::adam_scalars(AdamParams{}, 1);
  EXPECT_THROW(detail::adam_tensor_ops(p, g, m, v, s, at::zeros({8}, at::kDouble)), deepspeed::Error);
  EXPECT_THROW(detail::adam_tensor_ops(p, g, m, v, s, at::zeros({7}, at::kBFloat16)), deepspeed::Error);
}

}  // namespace
}  // namespace deepspeed::ops
