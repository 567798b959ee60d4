// The vocabulary-parallel embedding and cross-entropy (deepspeed/tp/parallel_linear.h).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "tp/split.h"

namespace deepspeed::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Megatron's _VocabParallelCrossEntropy: log(sum over the vocabulary of exp(logit - max)) - (target's logit - max),
// with the max, the target's logit and the sum each all-reduced over the group. A position whose target is
// ignore_index has loss 0 and no gradient (torch's cross_entropy without reduction).
struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target,
                            const comm::ProcessGroup& g, int64_t ignore_index) {
    comm::ProcessGroup group = g;
    const int64_t part = logits.size(-1);
    const int64_t begin = group.rank() * part;
    at::Tensor x = logits.to(at::kFloat).contiguous();
    at::Tensor max = std::get<0>(x.max(-1));
    group.all_reduce(max, comm::ReduceOp::kMax);
    x = x - max.unsqueeze(-1);
    // This rank's part of the target's logit: those whose target lies in its slice.
    const at::Tensor outside = (target < begin).logical_or(target >= begin + part);
    const at::Tensor local = (target - begin).masked_fill(outside, 0);
    at::Tensor picked = x.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0);
    group.all_reduce(picked, comm::ReduceOp::kSum);
    at::Tensor exp = x.exp();
    at::Tensor sum = exp.sum(-1);
    group.all_reduce(sum, comm::ReduceOp::kSum);
    const at::Tensor ignored = target == ignore_index;
    const at::Tensor loss = (sum.log() - picked).masked_fill(ignored, 0.0);
    exp.div_(sum.unsqueeze(-1));  // the softmax of this rank's slice, kept for backward
    exp.masked_fill_(ignored.unsqueeze(-1), 0.0);  // and nothing for the ignored positions
    ctx->save_for_backward({exp, local, outside.logical_or(ignored)});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();  // softmax - one_hot(target), on this rank's slice
    const at::Tensor inside = saved[2].logical_not().to(grad.scalar_type()).unsqueeze(-1);
    grad.scatter_add_(-1, saved[1].unsqueeze(-1), -inside);
    grad.mul_(grads[0].unsqueeze(-1));
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, comm::ProcessGroup group)
    : VocabParallelEmbeddingImpl(at::randn({vocab, dim}), std::move(group)) {}  // torch::nn::Embedding's N(0, 1)

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const at::Tensor& full, comm::ProcessGroup group)
    : group_(std::move(group)) {
  num_embeddings = full.size(0);
  check_splits(num_embeddings, group_, "VocabParallelEmbedding", "the vocabulary");
  const int64_t part = num_embeddings / group_.size();
  vocab_begin = group_.rank() * part;
  vocab_end = vocab_begin + part;
  weight = register_parameter("weight", slice_of(full, 0, group_));
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  const at::Tensor outside = (ids < vocab_begin).logical_or(ids >= vocab_end);
  const at::Tensor local = (ids - vocab_begin).masked_fill(outside, 0);
  at::Tensor rows = at::embedding(weight, local);
  rows = rows.masked_fill(outside.unsqueeze(-1), 0.0);
  return reduce_from_region(rows, group_);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        const comm::ProcessGroup& group, int64_t ignore_index) {
  check_splits(logits.size(-1) * group.size(), group, "vocab_parallel_cross_entropy", "the vocabulary");
  DS_CHECK(target.sizes() == logits.sizes().slice(0, logits.dim() - 1), "vocab_parallel_cross_entropy: target shape ",
           target.sizes(), " does not match logits ", logits.sizes(), " without their last dimension");
  return VocabParallelCrossEntropy::apply(logits, target, group, ignore_index);
}

at::Tensor vocab_parallel_cross_entropy_mean(const at::Tensor& logits, const at::Tensor& target,
                                             const comm::ProcessGroup& group, int64_t ignore_index) {
  const at::Tensor counted = (target != ignore_index).sum().to(at::kFloat);
  return vocab_parallel_cross_entropy(logits, target, group, ignore_index).sum() / counted;
}

}  // namespace deepspeed::tp
