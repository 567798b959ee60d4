// See deepspeed/sequence/loss.h.
#include "deepspeed/sequence/loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "comm/group_capsule.h"

namespace deepspeed::sequence {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every rank's scalar, in group-rank order. Backward: every rank's gradient of the gathered vector, summed, at this
// rank's place (each rank used every entry).
struct GatherScalars : public torch::autograd::Function<GatherScalars> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    comm::ProcessGroup g = group;  // a handle: copies share the group
    ctx->saved_data["group"] = comm::group_capsule(group);
    at::Tensor all = at::empty({g.size()}, x.options());
    g.all_gather_into_tensor(all, x.reshape({1}).contiguous());
    return all;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    comm::ProcessGroup& g = comm::capsule_group(ctx->saved_data["group"]);
    at::Tensor summed = grads[0].contiguous().clone();
    g.all_reduce(summed);
    return {summed[g.rank()].reshape({}), at::Tensor()};
  }
};

}  // namespace

at::Tensor sequence_parallel_mean(const at::Tensor& loss_sum, const at::Tensor& count,
                                  const comm::ProcessGroup& group) {
  const at::Tensor n = count.to(loss_sum.scalar_type()).reshape({});
  if (!group.is_member() || group.size() == 1) return loss_sum / n;
  at::Tensor total = n.detach().clone().reshape({1});
  comm::ProcessGroup g = group;  // a handle: copies share the group
  g.all_reduce(total);
  return GatherScalars::apply(loss_sum, group).sum() / total.reshape({});
}

}  // namespace deepspeed::sequence
