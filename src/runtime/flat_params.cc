#include "runtime/flat_params.h"

#include <ATen/ATen.h>

#include <unordered_set>

#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

// Each parameter starts on a 64-byte boundary, as a fresh allocation would: SIMD kernels then take the same path
// (and round the same way) on a parameter view as on a standalone tensor, and the views stay vector-aligned.
constexpr int64_t kAlignElems = 16;

int64_t align_up(int64_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

at::Tensor view_of(const at::Tensor& flat, int64_t offset, const at::Tensor& like) {
  return flat.narrow(0, offset, like.numel()).view(like.sizes());
}

}  // namespace

void flatten_into(std::vector<FlatGroup>& groups) {
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
      DS_CHECK(p.scalar_type() == at::kFloat, "parameter group ", g, ": parameter ", i, " is ",
               p.scalar_type(), "; the fp32 engine needs float parameters (use bf16/fp16 config for mixed precision)");
      DS_CHECK(seen.insert(p.unsafeGetTensorImpl()).second, "parameter group ", g, ": parameter ", i,
               " appears twice (in this or an earlier group)");
      group.offsets.push_back(total);
      total = align_up(total + p.numel());
    }
    auto options = group.params[0].options().dtype(at::kFloat).requires_grad(false);
    group.params_flat = at::zeros({total}, options);  // padding stays zero: no gradient, no update
    group.grads_flat = at::zeros({total}, options);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < group.params.size(); ++i) {
      at::Tensor& p = group.params[i];
      at::Tensor view = view_of(group.params_flat, group.offsets[i], p);
      view.copy_(p);
      // set_data keeps the parameter's identity (autograd node, module registration) while its storage moves.
      p.set_data(view);
      p.mutable_grad() = view_of(group.grads_flat, group.offsets[i], p);
    }
  }
}

void zero_grads(std::vector<FlatGroup>& groups) {
  for (auto& group : groups) group.grads_flat.zero_();
  ensure_grad_views(groups);
}

void ensure_grad_views(std::vector<FlatGroup>& groups) {
  for (auto& group : groups) {
    for (size_t i = 0; i < group.params.size(); ++i) {
      at::Tensor& p = group.params[i];
      const at::Tensor& grad = p.grad();
      if (!grad.defined() || grad.data_ptr() != group.grads_flat.data_ptr<float>() + group.offsets[i]) {
        at::Tensor view = view_of(group.grads_flat, group.offsets[i], p);
        if (grad.defined()) view.copy_(grad);
        p.mutable_grad() = view;
      }
    }
  }
}

}  // namespace deepspeed::runtime
