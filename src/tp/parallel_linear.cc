// Column- and row-parallel linear layers (deepspeed/tp/parallel_linear.h).
#include <ATen/ATen.h>
#include <torch/nn/functional/linear.h>

#include <utility>
#include <vector>

#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "tp/split.h"

namespace deepspeed::tp {

void check_splits(int64_t count, const comm::ProcessGroup& group, const char* layer, const char* counted) {
  DS_CHECK(group.is_member(), layer, ": this rank is not in the tensor-parallel group ", group.name());
  DS_CHECK(count % group.size() == 0, layer, ": ", counted, " (", count, ") must divide by the tensor-parallel size (",
           group.size(), ")");
}

at::Tensor slice_of(const at::Tensor& t, int64_t dim, const comm::ProcessGroup& group, int64_t fused_parts) {
  return slice_split(t.detach(), dim, fused_parts, group.rank(), group.size()).clone();
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, bool with_bias, comm::ProcessGroup group,
                                                   bool gather)
    : gather_output(gather), group_(std::move(group)) {
  check_splits(out, group_, "ColumnParallelLinear", "output features");
  take(torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(with_bias)));
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const torch::nn::Linear& full, comm::ProcessGroup group,
                                                   bool gather, int64_t parts)
    : gather_output(gather), fused_parts(parts), group_(std::move(group)) {
  DS_CHECK(fused_parts >= 1 && full->options.out_features() % fused_parts == 0, "ColumnParallelLinear: output features (",
           full->options.out_features(), ") must divide into fused_parts (", fused_parts, ")");
  DS_CHECK(fused_parts == 1 || !gather_output,
           "ColumnParallelLinear: gather_output would interleave the slices of fused blocks; gather them per block");
  check_splits(full->options.out_features() / fused_parts, group_, "ColumnParallelLinear", "output features per block");
  take(full);
}

void ColumnParallelLinearImpl::take(const torch::nn::Linear& full) {
  in_features = full->options.in_features();
  out_features = full->options.out_features();
  weight = register_parameter("weight", slice_of(full->weight, 0, group_, fused_parts));
  if (full->bias.defined()) bias = register_parameter("bias", slice_of(full->bias, 0, group_, fused_parts));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor y = overlap_comm && group_.size() > 1
                           ? linear_overlapping_grad_all_reduce(x, weight, bias, group_)
                           : torch::nn::functional::linear(copy_to_region(x, group_), weight, bias);
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

std::vector<SplitParameter> split_parameters(const torch::nn::Module& module, int* group_size) {
  std::vector<SplitParameter> out;
  int size = 0;
  auto note = [&](const std::string& name, const comm::ProcessGroup& g) {
    DS_CHECK(size == 0 || size == g.size(), "tensor parallelism: ", name, " is split over ", g.size(),
             " ranks where other layers are split over ", size);
    size = g.size();
  };
  auto visit = [&](const std::string& name, const torch::nn::Module* m) {
    if (const auto* col = dynamic_cast<const ColumnParallelLinearImpl*>(m)) {
      note(name, col->group());
      out.push_back({col->weight, 0, col->fused_parts, col->group()});
      if (col->bias.defined()) out.push_back({col->bias, 0, col->fused_parts, col->group()});
    } else if (const auto* row = dynamic_cast<const RowParallelLinearImpl*>(m)) {
      note(name, row->group());
      out.push_back({row->weight, 1, 1, row->group()});
    } else if (const auto* emb = dynamic_cast<const VocabParallelEmbeddingImpl*>(m)) {
      note(name, emb->group());
      out.push_back({emb->weight, 0, 1, emb->group()});
    }
  };
  visit("the model", &module);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) visit(item.key(), item.value().get());
  if (group_size != nullptr) *group_size = size;
  return out;
}

std::map<std::string, std::pair<int64_t, int64_t>> split_layout(const torch::nn::Module& module) {
  std::map<const void*, std::pair<int64_t, int64_t>> by_tensor;
  for (const SplitParameter& p : split_parameters(module))
    by_tensor[p.param.unsafeGetTensorImpl()] = {p.dim, p.fused_parts};
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (const auto& item : module.named_parameters()) {
    auto it = by_tensor.find(item.value().unsafeGetTensorImpl());
    if (it != by_tensor.end()) out[item.key()] = it->second;
  }
  return out;
}

std::vector<at::Tensor> sharded_parameters(const torch::nn::Module& module, int* group_size) {
  std::vector<at::Tensor> out;
  for (const SplitParameter& p : split_parameters(module, group_size)) out.push_back(p.param);
  return out;
}

void set_overlap_comm(torch::nn::Module& module, bool overlap) {
  for (const auto& m : module.modules(/*include_self=*/true))
    if (auto* col = dynamic_cast<ColumnParallelLinearImpl*>(m.get())) col->overlap_comm = overlap;
}

}  // namespace deepspeed::tp
