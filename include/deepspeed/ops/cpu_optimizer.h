// Fused CPU optimizer steps over flat fp32 tensors: Adam/AdamW, SGD, Adagrad and Lion, as
// DeepSpeed's cpu_adam, cpu_adagrad and cpu_lion (and torch.optim.SGD) compute them; and LAMB's phases (ATen ops,
// see lamb_moments below).
//
// Each call updates one parameter tensor and its optimizer state in ONE pass over memory (read
// param, grad and state, write param and state), with SIMD (see simd.h) inside and OpenMP tiles of
// kTileElements across at::get_num_threads() threads. Elements are independent and their math does
// not depend on where a tile starts, so results are bit-identical for any thread count and any SIMD
// variant.
//
// Step numbering is 1-based, as in DeepSpeed and torch.optim. On step 1 the incoming state is
// ignored and the kernel starts from torch's initial state (zeros for Adam and Lion, the first
// update for SGD momentum, initial_accumulator_value for Adagrad), so state tensors may be
// allocated with at::empty.
//
// Accuracy: against torch.optim (float math, FMA in its vector kernels) the results agree to ~1e-7
// relative per step; the tests hold them to 1e-6 (relative where |value| > 1) over 20+ steps.
//
// Fused copy-back (DeepSpeed's `fp16_param`): every step function takes an optional `param_copy`, a
// contiguous bf16 or fp16 CPU tensor of param's numel that receives the updated fp32 param rounded
// to its dtype in the same pass, bit for bit what `param.to(param_copy.scalar_type())` would give
// (round to nearest even; NaN stays NaN, payload unspecified). It is how a mixed-precision model's
// parameters get their new values without a second trip through memory over the fp32 master: the
// kernel converts each small chunk right after updating it, while it is still in L1.
//
// Inputs must be contiguous fp32 CPU tensors of the same numel (any shape); bad inputs or
// hyper-parameters throw deepspeed::Error naming the argument and value. Thread-safety: calls on
// disjoint tensors may run concurrently; the caller owns the tensors for the duration of a call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "deepspeed/ops/simd.h"

namespace deepspeed::ops {

// Elements per OpenMP work item: large enough to amortise scheduling, small enough to balance
// threads.
constexpr int64_t kTileElements = 64 * 1024;

// DeepSpeedCPUAdam / FusedAdam hyper-parameters, with DeepSpeed's defaults.
struct AdamParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // true: AdamW (decoupled decay, p *= 1 - lr * weight_decay); false: Adam (L2 added to the
  // gradient).
  bool adamw_mode = true;
  bool bias_correction = true;
  bool amsgrad = false;  // not supported; true is rejected, as DeepSpeed's cpu_adam does
};

// torch.optim.SGD hyper-parameters (DeepSpeed uses torch's SGD), with torch's defaults.
struct SgdParams {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// DeepSpeedCPUAdagrad hyper-parameters (DeepSpeed's defaults) plus torch.optim.Adagrad's lr_decay
// and initial_accumulator_value.
struct AdagradParams {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
};

// DeepSpeedCPULion hyper-parameters, with DeepSpeed's defaults.
struct LionParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;  // decoupled: p *= 1 - lr * weight_decay
};

// DeepSpeed's FusedLamb hyper-parameters, with its defaults.
struct LambParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool eps_inside_sqrt = false;  // true: sqrt(v + eps); false: sqrt(v) + eps
  double max_coeff = 10.0;
  double min_coeff = 0.01;
};

// Sums of squares over the elements a lamb_moments call saw.
struct LambNorms {
  double param_sq = 0.0;   // sum of p^2 (before the update)
  double update_sq = 0.0;  // sum of u^2
};

// Adam/AdamW: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), with bc_i = 1 - b_i^step when bias_correction.
void adam_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
               const AdamParams& params, int64_t step, SimdLevel simd = SimdLevel::kAuto,
               const at::Tensor& param_copy = {});

// SGD with torch semantics: d = g + wd*p; with momentum, buf = d on step 1, else
// buf = momentum*buf + (1-dampening)*d, and d = nesterov ? d + momentum*buf : buf; p -= lr*d.
// `momentum_buffer` may be undefined when params.momentum == 0.
void sgd_step(at::Tensor param, const at::Tensor& grad, at::Tensor momentum_buffer,
              const SgdParams& params, int64_t step, SimdLevel simd = SimdLevel::kAuto,
              const at::Tensor& param_copy = {});

// Adagrad with torch semantics: g += wd*p; sum += g^2; p -= lr/(1+(step-1)*lr_decay) *
// g/(sqrt(sum)+eps).
void adagrad_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg_sq,
                  const AdagradParams& params, int64_t step, SimdLevel simd = SimdLevel::kAuto,
                  const at::Tensor& param_copy = {});

// Lion (Chen et al. 2023): c = b1*m + (1-b1)*g; p = p*(1-lr*wd) - lr*sign(c); m = b2*m + (1-b2)*g.
// sign(0) = 0 (a zero gradient on a zero momentum leaves p to the decay alone).
void lion_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg,
               const LionParams& params, int64_t step, SimdLevel simd = SimdLevel::kAuto,
               const at::Tensor& param_copy = {});

// LAMB (You et al. 2019) as DeepSpeed's FusedLamb computes it, in phases, so that a tensor whose elements are spread
// over several calls (a parameter cut by ZeRO partitions) can sum its norms between them:
//   lamb_moments:     m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; returns the sums of p^2 and of u^2, where
//                     u = m / (sqrt(v) + eps) + weight_decay * p  (sqrt(v + eps) with eps_inside_sqrt);
//   lamb_coefficient: from one whole tensor's sums: ||p|| / ||u|| clamped to [min_coeff, max_coeff], 1 when either
//                     norm is 0;
//   lamb_apply:       p -= step_size * coeff * u with u recomputed from the updated moments (same arithmetic), and
//                     step_size = lr * sqrt(1 - b2^step) / (1 - b1^step) (lr without bias_correction).
// On step 1 the incoming moments are ignored (zeros). Tensors: fp32 and contiguous, on one device (ATen ops, so any
// device); `param_copy` as in the other steps (bf16/fp16, receives the updated param).
LambNorms lamb_moments(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                       const LambParams& params, int64_t step);
double lamb_coefficient(const LambNorms& whole_tensor, const LambParams& params);
void lamb_apply(at::Tensor param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, const LambParams& params,
                int64_t step, double coeff, const at::Tensor& param_copy = {});

// dst = src.to(dst.scalar_type()) for a contiguous fp32 `src` and a bf16 or fp16 `dst` of the same
// numel, with the copy-back's converters (SIMD, OpenMP tiles; same rounding as param_copy above).
void convert_fp32_to(at::Tensor dst, const at::Tensor& src, SimdLevel simd = SimdLevel::kAuto);

}  // namespace deepspeed::ops
