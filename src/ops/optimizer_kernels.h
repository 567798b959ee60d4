// The per-tile optimizer kernels behind cpu_optimizer.h, one table of function pointers per SIMD
// level.
//
// A tile kernel updates `n` consecutive elements given raw pointers and precomputed float scalars;
// it knows nothing of tensors, threads or validation (cpu_optimizer.cc does those). The scalars are
// computed once per step in double and rounded to float, so every tile and every SIMD variant sees
// the same constants. The arrays passed to one call must not overlap (the kernels are compiled as
// if they were `restrict`).
#pragma once

#include <cstdint>

#include "deepspeed/ops/cpu_optimizer.h"
#include "deepspeed/ops/simd.h"

namespace deepspeed::ops::detail {

struct AdamScalars {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float step_size;     // lr / bias_correction1
  float inv_sqrt_bc2;  // 1 / sqrt(bias_correction2)
  float l2;            // weight decay added to the gradient (Adam mode), else 0
  float decay;         // 1 - lr * weight_decay (AdamW mode), else 1
  bool first;          // step 1: ignore incoming state
};

struct SgdScalars {
  float lr;
  float weight_decay;
  float momentum;
  float one_minus_dampening;
  bool nesterov;
  bool first;
};

struct AdagradScalars {
  float clr;  // lr / (1 + (step - 1) * lr_decay)
  float weight_decay;
  float eps;
  float initial_accumulator_value;
  bool first;
};

struct LionScalars {
  float lr;
  float decay;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  bool first;
};

using AdamTileFn = void (*)(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            int64_t n, const AdamScalars& s);
// `buf` is unused (may be null) when s.momentum == 0.
using SgdTileFn = void (*)(float* param, const float* grad, float* buf, int64_t n,
                           const SgdScalars& s);
using AdagradTileFn = void (*)(float* param, const float* grad, float* sum, int64_t n,
                               const AdagradScalars& s);
using LionTileFn = void (*)(float* param, const float* grad, float* exp_avg, int64_t n,
                            const LionScalars& s);

struct KernelTable {
  AdamTileFn adam = nullptr;
  SgdTileFn sgd = nullptr;
  SgdTileFn sgd_momentum = nullptr;
  AdagradTileFn adagrad = nullptr;
  LionTileFn lion = nullptr;
};

// The kernels compiled for `level` (a concrete level, not kAuto); a table of nulls when this build
// has none.
const KernelTable& kernel_table(SimdLevel level);

// One step's scalars from the hyper-parameters (computed in double, rounded to float once): what every tile kernel
// and the tensor-op steps (tensor_op_steps.h) of that step use. Hyper-parameters are validated by the caller.
AdamScalars adam_scalars(const AdamParams& params, int64_t step);
SgdScalars sgd_scalars(const SgdParams& params, int64_t step);
AdagradScalars adagrad_scalars(const AdagradParams& params, int64_t step);
LionScalars lion_scalars(const LionParams& params, int64_t step);

}  // namespace deepspeed::ops::detail
