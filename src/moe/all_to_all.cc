#include "moe/all_to_all.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

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

// The group's handle, owned by the autograd node: the backward may run after the layer (and the handle it passed
// to forward) is gone, and a handle keeps its group alive.
struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(comm::ProcessGroup g) : group(std::move(g)) {}
  comm::ProcessGroup group;
};

struct AllToAll : public torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    ctx->saved_data["group"] = at::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    return exchange(x, const_cast<comm::ProcessGroup&>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule());
    return {exchange(grads[0], holder->group), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all(const at::Tensor& x, const comm::ProcessGroup& group) {
  if (group.size() <= 1) return x;
  return AllToAll::apply(x, group);
}

}  // namespace deepspeed::moe
