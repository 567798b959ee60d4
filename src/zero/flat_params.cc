#include "zero/flat_params.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <unordered_set>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

// Each parameter starts on a 64-byte boundary, as a fresh allocation would: SIMD kernels then take the same path
// (and round the same way) on a parameter view as on a standalone tensor, and the views stay vector-aligned.
constexpr int64_t kAlignElems = 16;

int64_t align_up(int64_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

at::Tensor view_of(const at::Tensor& flat, int64_t offset, const at::Tensor& like) {
  return flat.narrow(0, offset, like.numel()).view(like.sizes());
}

}  // namespace

const comm::ProcessGroup& copies_group(const FlatGroup& group, const comm::ProcessGroup& fallback) {
  return group.group.is_member() ? group.group : fallback;
}

bool grads_are_views(const FlatGroup& group) {
  return group.grads_flat.defined() && group.grads_flat.scalar_type() == group.params_flat.scalar_type();
}

void flatten_into(std::vector<FlatGroup>& groups, const FlattenOptions& options) {
  std::unordered_set<const void*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    FlatGroup& group = groups[g];
    DS_CHECK(!group.params.empty(), "parameter group ", g, " has no parameters");
    int64_t total = 0;
    group.offsets.clear();
    for (size_t i = 0; i < group.params.size(); ++i) {
      const at::Tensor& p = group.params[i];
      DS_CHECK(p.defined(), "parameter group ", g, ": parameter ", i, " is undefined");
      DS_CHECK(p.requires_grad(), "parameter group ", g, ": parameter ", i, " does not require grad");
      DS_CHECK(at::isFloatingType(p.scalar_type()), "parameter group ", g, ": parameter ", i, " is ",
               p.scalar_type(), "; only floating-point parameters can be trained");
      DS_CHECK(options.dtype != at::kFloat || p.scalar_type() == at::kFloat, "parameter group ", g,
               ": parameter ", i, " is ", p.scalar_type(),
               "; an fp32 run needs float parameters (enable bf16 or fp16 in the config for half precision)");
      DS_CHECK(seen.insert(p.unsafeGetTensorImpl()).second, "parameter group ", g, ": parameter ", i,
               " appears twice (in this or an earlier group)");
      group.offsets.push_back(total);
      total = align_up(total + p.numel());
    }
    const comm::ProcessGroup& copies = copies_group(group, options.group);
    const bool split = options.partitioned && copies.is_member();
    group.layout = zero::PartitionLayout(total, split ? copies.size() : 1, split ? copies.rank() : 0);
    const int64_t padded = group.layout.padded_numel();  // == total when not partitioned (already aligned)
    auto device = group.params[0].device();
    // Padding stays zero: no gradient reaches it, so no update moves it.
    group.params_flat = at::zeros({padded}, at::TensorOptions().dtype(options.dtype).device(device));
    DS_CHECK(options.grad_dtype == at::kFloat || options.grad_dtype == options.dtype, "gradients accumulate in fp32 "
             "or in the parameters' dtype (", options.dtype, "), not ", options.grad_dtype);
    group.grads_flat =
        options.full_grads ? at::zeros({padded}, at::TensorOptions().dtype(options.grad_dtype).device(device))
                           : at::Tensor();
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < group.params.size(); ++i) {
      at::Tensor& p = group.params[i];
      at::Tensor view = view_of(group.params_flat, group.offsets[i], p);
      view.copy_(p);
      // set_data keeps the parameter's identity (autograd node, module registration) while its storage moves.
      p.set_data(view);
      p.mutable_grad() = grads_are_views(group) ? view_of(group.grads_flat, group.offsets[i], p) : at::Tensor();
    }
  }
}

void zero_grads(std::vector<FlatGroup>& groups) {
  for (auto& group : groups)
    if (group.grads_flat.defined()) group.grads_flat.zero_();
  ensure_grad_views(groups);
}

void ensure_grad_views(std::vector<FlatGroup>& groups) {
  for (auto& group : groups) {
    if (!grads_are_views(group)) continue;
    for (size_t i = 0; i < group.params.size(); ++i) {
      at::Tensor& p = group.params[i];
      const at::Tensor& grad = p.grad();
      const char* at = static_cast<const char*>(group.grads_flat.data_ptr()) +
                       group.offsets[i] * static_cast<int64_t>(group.grads_flat.element_size());
      if (!grad.defined() || grad.data_ptr() != at) {
        at::Tensor view = view_of(group.grads_flat, group.offsets[i], p);
        if (grad.defined()) view.copy_(grad);
        p.mutable_grad() = view;
      }
    }
  }
}

}  // namespace deepspeed::zero
