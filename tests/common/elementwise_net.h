// A model of elementwise ops only, for fp16 engine tests: LibTorch 1.13 has no fp16 matmul on CPU, but it has
// mul, add, pow, sum and mean in fp16, and the engine path is the same one a GPU model takes.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace elementwise_net {

// y = sum_i w2_i * (w1_i * x_i + b_i)^2; loss = mean((y - t)^2).
struct ElementwiseNetImpl : torch::nn::Module {
  at::Tensor w1, b, w2;
  ElementwiseNetImpl() {
    at::manual_seed(11);
    w1 = register_parameter("w1", at::randn({37}) * 0.5);
    b = register_parameter("b", at::randn({37}) * 0.1);
    w2 = register_parameter("w2", at::randn({37}) * 0.1);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t) {
    at::Tensor h = (x * w1 + b).pow(2);
    return ((h * w2).sum(1) - t).pow(2).mean();
  }
};
TORCH_MODULE(ElementwiseNet);

// Rank `rank`'s fp16 batch (4 x 37) and targets for `step`.
inline at::Tensor batch_for(int rank, int step, at::Tensor* target) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + 10 * step + rank);
  *target = at::randn({4}, gen).to(at::kHalf);
  return at::randn({4, 37}, gen).to(at::kHalf);
}

}  // namespace elementwise_net
