// The tensor-parallel collectives as autograd functions (deepspeed/tp/parallel_linear.h).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/group_capsule.h"
#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"

namespace deepspeed::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void hold(AutogradContext* ctx, const comm::ProcessGroup& group) { ctx->saved_data["group"] = comm::group_capsule(group); }

comm::ProcessGroup& held(AutogradContext* ctx) { return comm::capsule_group(ctx->saved_data["group"]); }

at::Tensor all_reduce(const at::Tensor& x, comm::ProcessGroup& group) {
  at::Tensor out = x.contiguous().clone();
  group.all_reduce(out, comm::ReduceOp::kSum);
  return out;
}

at::Tensor gather_last(const at::Tensor& x, comm::ProcessGroup& group) {
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty({group.size() * in.numel()}, in.options());
  group.all_gather_into_tensor(out, in);
  std::vector<int64_t> shape = {group.size()};
  for (int64_t d : in.sizes()) shape.push_back(d);
  return at::cat(out.view(shape).unbind(0), /*dim=*/-1);
}

at::Tensor split_last(const at::Tensor& x, const comm::ProcessGroup& group) {
  const int64_t n = x.size(-1);
  DS_CHECK(n % group.size() == 0, "tensor parallelism: the last dimension (", n, ") must divide by the group size (",
           group.size(), ")");
  return x.chunk(group.size(), -1)[group.rank()].contiguous();
}

struct CopyToRegion : public torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    hold(ctx, group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduce(grads[0], held(ctx)), at::Tensor()};
  }
};

struct ReduceFromRegion : public torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    return all_reduce(x, const_cast<comm::ProcessGroup&>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct GatherFromRegion : public torch::autograd::Function<GatherFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    hold(ctx, group);
    return gather_last(x, const_cast<comm::ProcessGroup&>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {split_last(grads[0], held(ctx)), at::Tensor()};
  }
};

struct ScatterToRegion : public torch::autograd::Function<ScatterToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const comm::ProcessGroup& group) {
    hold(ctx, group);
    return split_last(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gather_last(grads[0], held(ctx)), at::Tensor()};
  }
};

// y = x W^T + b. Backward: the input gradient's all-reduce starts first and is waited for after the weight and bias
// gradients are computed. The gradients are the products linear's own backward takes, on 2-D views.
struct LinearOverlappingGradAllReduce : public torch::autograd::Function<LinearOverlappingGradAllReduce> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const comm::ProcessGroup& group) {
    hold(ctx, group);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["bias"] = bias.defined();
    return at::linear(x, weight, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor gy = grads[0].reshape({-1, grads[0].size(-1)});
    at::Tensor gx = gy.mm(weight);
    comm::Work work = held(ctx).all_reduce(gx, comm::ReduceOp::kSum, /*async_op=*/true);
    const at::Tensor gw = gy.t().mm(x.reshape({-1, x.size(-1)}));
    const at::Tensor gb = ctx->saved_data["bias"].toBool() ? gy.sum(0) : at::Tensor();
    work.wait();
    return {gx.view(x.sizes()), gw, gb, at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_overlapping_grad_all_reduce(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                              const comm::ProcessGroup& group) {
  return LinearOverlappingGradAllReduce::apply(x, weight, bias, group);
}

at::Tensor copy_to_region(const at::Tensor& x, const comm::ProcessGroup& group) {
  return group.size() <= 1 ? x : CopyToRegion::apply(x, group);
}

at::Tensor reduce_from_region(const at::Tensor& x, const comm::ProcessGroup& group) {
  return group.size() <= 1 ? x : ReduceFromRegion::apply(x, group);
}

at::Tensor gather_from_region(const at::Tensor& x, const comm::ProcessGroup& group) {
  return group.size() <= 1 ? x : GatherFromRegion::apply(x, group);
}

at::Tensor scatter_to_region(const at::Tensor& x, const comm::ProcessGroup& group) {
  return group.size() <= 1 ? x : ScatterToRegion::apply(x, group);
}

}  // namespace deepspeed::tp
