#include "moe/all_to_all.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

namespace deepspeed::moe {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor exchange(const at::Tensor& x, comm::ProcessGroup& group) {
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  group.all_to_all_single(out, in);
  return out;
}

struct AllToAll : public torch::autograd::Function<AllToAll> {
  // The group travels as an address: autograd's saved data holds IValues only.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return exchange(x, *reinterpret_cast<comm::ProcessGroup*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<comm::ProcessGroup*>(ctx->saved_data["group"].toInt());
    return {exchange(grads[0], *group), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all(const at::Tensor& x, const comm::ProcessGroup& group) {
  if (group.size() <= 1) return x;
  return AllToAll::apply(x, static_cast<int64_t>(reinterpret_cast<intptr_t>(&group)));
}

}  // namespace deepspeed::moe
