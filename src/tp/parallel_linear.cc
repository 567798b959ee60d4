// Column- and row-parallel linear layers (deepspeed/tp/parallel_linear.h).
#include <ATen/ATen.h>
#include <torch/nn/functional/linear.h>

#include <utility>

#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "tp/split.h"

namespace deepspeed::tp {

void check_splits(int64_t count, const comm::ProcessGroup& group, const char* layer, const char* counted) {
  DS_CHECK(group.is_member(), layer, ": this rank is not in the tensor-parallel group ", group.name());
  DS_CHECK(count % group.size() == 0, layer, ": ", counted, " (", count, ") must divide by the tensor-parallel size (",
           group.size(), ")");
}

at::Tensor slice_of(const at::Tensor& t, int64_t dim, const comm::ProcessGroup& group) {
  const int64_t part = t.size(dim) / group.size();
  return t.detach().narrow(dim, group.rank() * part, part).clone();
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, bool with_bias, comm::ProcessGroup group,
                                                   bool gather)
    : gather_output(gather), group_(std::move(group)) {
  check_splits(out, group_, "ColumnParallelLinear", "output features");
  take(torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(with_bias)));
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const torch::nn::Linear& full, comm::ProcessGroup group,
                                                   bool gather)
    : gather_output(gather), group_(std::move(group)) {
  check_splits(full->options.out_features(), group_, "ColumnParallelLinear", "output features");
  take(full);
}

void ColumnParallelLinearImpl::take(const torch::nn::Linear& full) {
  in_features = full->options.in_features();
  out_features = full->options.out_features();
  weight = register_parameter("weight", slice_of(full->weight, 0, group_));
  if (full->bias.defined()) bias = register_parameter("bias", slice_of(full->bias, 0, group_));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor y = torch::nn::functional::linear(copy_to_region(x, group_), weight, bias);
  return gather_output ? gather_from_region(y, group_) : y;
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, bool with_bias, comm::ProcessGroup group,
                                             bool parallel_input)
    : input_is_parallel(parallel_input), group_(std::move(group)) {
  check_splits(in, group_, "RowParallelLinear", "input features");
  take(torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(with_bias)));
}

RowParallelLinearImpl::RowParallelLinearImpl(const torch::nn::Linear& full, comm::ProcessGroup group,
                                             bool parallel_input)
    : input_is_parallel(parallel_input), group_(std::move(group)) {
  check_splits(full->options.in_features(), group_, "RowParallelLinear", "input features");
  take(full);
}

void RowParallelLinearImpl::take(const torch::nn::Linear& full) {
  in_features = full->options.in_features();
  out_features = full->options.out_features();
  weight = register_parameter("weight", slice_of(full->weight, 1, group_));
  if (full->bias.defined()) bias = register_parameter("bias", full->bias.detach().clone());
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor part = input_is_parallel ? x : scatter_to_region(x, group_);
  DS_CHECK(part.size(-1) == weight.size(1), "RowParallelLinear: expected input features ",
           input_is_parallel ? weight.size(1) : in_features, ", got ", x.size(-1));
  at::Tensor y = reduce_from_region(torch::nn::functional::linear(part, weight), group_);
  return bias.defined() ? y + bias : y;
}

}  // namespace deepspeed::tp
