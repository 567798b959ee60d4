// A strong reference to a parameter's AccumulateGrad node, the node ZeRO hooks to learn that a gradient is ready.
// The parameter holds only a weak reference, so whoever hooks the node keeps this one alive (FACTS.md). Its type
// follows LibTorch (std::shared_ptr<Node> in older releases, c10::intrusive_ptr<Node> in current ones).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

namespace deepspeed::zero {

using GradAccumulatorRef =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

}  // namespace deepspeed::zero
