#include "moe/all_to_all.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "comm/group_capsule.h"

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
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    ctx->saved_data["group"] = comm::group_capsule(group);
    return exchange(x, const_cast<comm::ProcessGroup&>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {exchange(grads[0], comm::capsule_group(ctx->saved_data["group"])), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all(const at::Tensor& x, const comm::ProcessGroup& group) {
  if (group.size() <= 1) return x;
  return AllToAll::apply(x, group);
}

}  // namespace deepspeed::moe
