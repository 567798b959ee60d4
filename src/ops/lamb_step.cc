// LAMB's phases (deepspeed/ops/cpu_optimizer.h) in ATen ops: each phase is a few passes over the tensors it is given
// (one parameter, or the piece of it a ZeRO partition holds), on any device.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "deepspeed/error.h"
#include "deepspeed/ops/cpu_optimizer.h"

namespace deepspeed::ops {
namespace {

void check_lamb(const char* op, const at::Tensor& param, std::initializer_list<const at::Tensor*> others,
                const LambParams& p, int64_t step) {
  DS_CHECK(step >= 1, op, ": step must be >= 1 (steps count from 1 as in DeepSpeed), got ", step);
  DS_CHECK(p.lr >= 0 && p.weight_decay >= 0 && p.eps > 0, op, ": lr and weight_decay must be >= 0 and eps > 0, got ",
           p.lr, ", ", p.weight_decay, ", ", p.eps);
  DS_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1, op, ": betas must be in [0, 1), got ", p.beta1,
           ", ", p.beta2);
  DS_CHECK(p.min_coeff > 0 && p.min_coeff <= p.max_coeff, op, ": need 0 < min_coeff <= max_coeff, got ", p.min_coeff,
           ", ", p.max_coeff);
  DS_CHECK(param.scalar_type() == at::kFloat && param.is_contiguous(), op, ": param must be a contiguous float32 "
           "tensor, got ", param.scalar_type());
  for (const at::Tensor* t : others)
    DS_CHECK(t->defined() && t->scalar_type() == at::kFloat && t->numel() == param.numel() &&
                 t->device() == param.device(),
             op, ": every state and gradient tensor must be float32 with param's ", param.numel(),
             " elements on its device");
}

// u = m / (sqrt(v) + eps) + wd * p, FusedLamb's update before the trust ratio.
at::Tensor lamb_update(const at::Tensor& param, const at::Tensor& m, const at::Tensor& v, const LambParams& p) {
  at::Tensor denom = p.eps_inside_sqrt ? (v + p.eps).sqrt_() : v.sqrt().add_(p.eps);
  at::Tensor u = m / denom;
  if (p.weight_decay != 0) u.add_(param, p.weight_decay);
  return u;
}

}  // namespace

LambNorms lamb_moments(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                       const LambParams& params, int64_t step) {
  check_lamb("lamb_moments", param, {&grad, &exp_avg, &exp_avg_sq}, params, step);
  // Detached views: the masters may be a model's own fp32 parameters, and these updates are not for autograd.
  param = param.detach();
  exp_avg = exp_avg.detach();
  exp_avg_sq = exp_avg_sq.detach();
  if (step == 1) {
    exp_avg.zero_();
    exp_avg_sq.zero_();
  }
  const at::Tensor g = grad.detach();
  exp_avg.mul_(params.beta1).add_(g, 1.0 - params.beta1);
  exp_avg_sq.mul_(params.beta2).addcmul_(g, g, 1.0 - params.beta2);
  const at::Tensor u = lamb_update(param, exp_avg, exp_avg_sq, params);
  LambNorms n;
  // Squares in fp32, summed in double: a sum split over ranks and fragments then agrees with one over the tensor.
  n.param_sq = at::sum(param.square(), at::kDouble).item<double>();
  n.update_sq = at::sum(u.square(), at::kDouble).item<double>();
  return n;
}

double lamb_coefficient(const LambNorms& whole_tensor, const LambParams& params) {
  const double w = std::sqrt(whole_tensor.param_sq), u = std::sqrt(whole_tensor.update_sq);
  if (w == 0 || u == 0) return 1.0;
  return std::min(std::max(w / u, params.min_coeff), params.max_coeff);
}

void lamb_apply(at::Tensor param, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, const LambParams& params,
                int64_t step, double coeff, const at::Tensor& param_copy) {
  check_lamb("lamb_apply", param, {&exp_avg, &exp_avg_sq}, params, step);
  param = param.detach();
  double step_size = params.lr;
  if (params.bias_correction) {
    const double bc1 = 1.0 - std::pow(params.beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(params.beta2, static_cast<double>(step));
    step_size = params.lr * std::sqrt(bc2) / bc1;
  }
  param.sub_(lamb_update(param, exp_avg.detach(), exp_avg_sq.detach(), params), step_size * coeff);
  if (param_copy.defined()) param_copy.copy_(param);
}

}  // namespace deepspeed::ops
