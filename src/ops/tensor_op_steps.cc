// See tensor_op_steps.h. Every line mirrors the kernel body in optimizer_kernels.cc: a * b + c is written as two
// operations (mul, then add) because ATen's add with alpha may fuse them, and the kernels round after each.
#include "ops/tensor_op_steps.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "deepspeed/error.h"

namespace deepspeed::ops::detail {
namespace {

// The scalars are floats; ATen multiplies a float tensor by a double scalar in float after rounding it, which
// gives the float back exactly.
double f(float x) { return static_cast<double>(x); }

void copy_back(const at::Tensor& param_copy, const at::Tensor& param) {
  if (!param_copy.defined()) return;
  check_param_copy(param_copy, param);
  param_copy.view({-1}).copy_(param.view({-1}));  // round to nearest even, as the kernels' converters
}

}  // namespace

void check_param_copy(const at::Tensor& param_copy, const at::Tensor& param) {
  DS_CHECK((param_copy.scalar_type() == at::kBFloat16 || param_copy.scalar_type() == at::kHalf) &&
               param_copy.device() == param.device() && param_copy.numel() == param.numel(),
           "param_copy must be a bfloat16 or float16 tensor of param's numel on param's device (", param.device(),
           "), got dtype=", param_copy.scalar_type(), " device=", param_copy.device(), " numel=", param_copy.numel());
}

void adam_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                     const AdamScalars& s, const at::Tensor& param_copy) {
  at::NoGradGuard no_grad;
  // g + l2 * p (l2 is 0 in AdamW mode: the product is then +-0 and the sum g itself, as in the kernel).
  at::Tensor g = grad.add(param.mul(f(s.l2)));
  // m = m * b1 + (1 - b1) * g; on step 1 the state starts at zero: 0 + (1 - b1) * g.
  at::Tensor gm = g.mul(f(s.one_minus_beta1));
  if (s.first) {
    exp_avg.zero_().add_(gm);
  } else {
    exp_avg.mul_(f(s.beta1)).add_(gm);
  }
  // v = v * b2 + (1 - b2) * g * g, the product taken left to right.
  at::Tensor gv = g.mul(f(s.one_minus_beta2)).mul_(g);
  if (s.first) {
    exp_avg_sq.zero_().add_(gv);
  } else {
    exp_avg_sq.mul_(f(s.beta2)).add_(gv);
  }
  // p = p * decay - step_size * (m / (sqrt(v) * inv_sqrt_bc2 + eps)).
  at::Tensor update = exp_avg_sq.sqrt().mul_(f(s.inv_sqrt_bc2)).add_(f(s.eps));
  update = exp_avg.div(update).mul_(f(s.step_size));
  param.mul_(f(s.decay)).sub_(update);
  copy_back(param_copy, param);
}

void sgd_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor momentum_buffer, const SgdScalars& s,
                    const at::Tensor& param_copy) {
  at::NoGradGuard no_grad;
  at::Tensor d = grad.add(param.mul(f(s.weight_decay)));  // d = g + wd * p
  if (s.momentum == 0.0f) {
    param.sub_(d.mul_(f(s.lr)));
    copy_back(param_copy, param);
    return;
  }
  // buf = d on step 1, else buf * mu + (1 - dampening) * d.
  if (s.first) {
    momentum_buffer.copy_(d);
  } else {
    momentum_buffer.mul_(f(s.momentum)).add_(d.mul(f(s.one_minus_dampening)));
  }
  at::Tensor u = s.nesterov ? d.add(momentum_buffer.mul(f(s.momentum))) : momentum_buffer.clone();
  param.sub_(u.mul_(f(s.lr)));
  copy_back(param_copy, param);
}

void adagrad_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor sum, const AdagradScalars& s,
                        const at::Tensor& param_copy) {
  at::NoGradGuard no_grad;
  at::Tensor g = grad.add(param.mul(f(s.weight_decay)));
  at::Tensor gg = g.mul(g);
  if (s.first) {
    sum.fill_(f(s.initial_accumulator_value)).add_(gg);
  } else {
    sum.add_(gg);
  }
  // p = p - clr * (g / (sqrt(sum) + eps)).
  at::Tensor update = g.div_(sum.sqrt().add_(f(s.eps))).mul_(f(s.clr));
  param.sub_(update);
  copy_back(param_copy, param);
}

void lion_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, const LionScalars& s,
                     const at::Tensor& param_copy) {
  at::NoGradGuard no_grad;
  if (s.first) exp_avg.zero_();
  // c = m * b1 + (1 - b1) * g; sign(c) from two comparisons (0 for 0 and for NaN, as in the kernel).
  at::Tensor c = exp_avg.mul(f(s.beta1)).add_(grad.mul(f(s.one_minus_beta1)));
  at::Tensor sign = c.gt(0).to(at::kFloat).sub_(c.lt(0).to(at::kFloat));
  param.mul_(f(s.decay)).sub_(sign.mul_(f(s.lr)));
  // m = m * b2 + (1 - b2) * g.
  exp_avg.mul_(f(s.beta2)).add_(grad.mul(f(s.one_minus_beta2)));
  copy_back(param_copy, param);
}

}  // namespace deepspeed::ops::detail
