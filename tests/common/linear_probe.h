// A module whose loss is sum(a * ca) + sum(b * cb): each parameter's gradient is exactly the constants it is given,
// so a test chooses every gradient element (and its dtype's rounding) directly. Two parameters, zero-initialized, of
// the sizes asked.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace ds_test {

struct LinearProbeImpl : torch::nn::Module {
  at::Tensor a, b;
  LinearProbeImpl(int64_t a_numel, int64_t b_numel) {
    a = register_parameter("a", at::zeros({a_numel}));
    b = register_parameter("b", at::zeros({b_numel}));
  }
  at::Tensor forward(const at::Tensor& ca, const at::Tensor& cb) { return (a * ca).sum() + (b * cb).sum(); }
};
TORCH_MODULE(LinearProbe);

}  // namespace ds_test
