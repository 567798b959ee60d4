// Tensor parallelism (Megatron-LM's layout, as DeepSpeed's AutoTP uses it): linear layers whose weight is split over
// the ranks of a tensor-parallel group, and the autograd-aware collectives between them.
//
//   ColumnParallelLinear: the output features are split; rank r holds rows [r*out/T, (r+1)*out/T) of the weight (and
//     of the bias). Its input is the full activation; its output this rank's slice of features (or, with
//     gather_output, all of them).
//   RowParallelLinear: the input features are split; rank r holds columns [r*in/T, (r+1)*in/T) of the weight. Its
//     input is this rank's slice of features (a column-parallel layer's output), its output the full activation,
//     summed over the group; the bias, whole on every rank, is added once after the sum.
//
//   VocabParallelEmbedding and vocab_parallel_cross_entropy: the vocabulary split over the ranks, for the embedding
//     and for the LM head's loss.
//
// A column-parallel layer followed by a row-parallel one (attention's q/k/v then its output projection, an MLP's up
// then down) needs one all-reduce in forward and one in backward, Megatron's 2 per block and pass.
//
// Every rank of the group must call the same layers in the same order (each call is a collective). Features must
// split evenly: a count not divisible by the group size is an error naming both numbers.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/tp/partition.h"

namespace deepspeed::tp {

// Megatron's mappings (mpu/mappings.py), each the other's transpose in backward.
// Forward: x as is; backward: the gradient all-reduced over `group` (a layer's input used by every rank's slice).
at::Tensor copy_to_region(const at::Tensor& x, const comm::ProcessGroup& group);
// Forward: x all-reduced (summed) over `group`; backward: the gradient as is.
at::Tensor reduce_from_region(const at::Tensor& x, const comm::ProcessGroup& group);
// Forward: every rank's x concatenated along the last dimension, in group-rank order; backward: this rank's slice.
at::Tensor gather_from_region(const at::Tensor& x, const comm::ProcessGroup& group);
// Forward: this rank's slice of x's last dimension; backward: the slices gathered.
at::Tensor scatter_to_region(const at::Tensor& x, const comm::ProcessGroup& group);
// linear(copy_to_region(x), weight, bias) whose backward starts the input gradient's all-reduce before it computes
// the weight and bias gradients and waits only after, so the collective runs beside that work (DeepSpeed's
// tensor_parallel.tp_overlap_comm, Megatron's async all-reduce of the column-parallel input gradient).
at::Tensor linear_overlapping_grad_all_reduce(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                              const comm::ProcessGroup& group);

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // A fresh layer: this rank's slice of a weight initialised as torch::nn::Linear(in, out) would be with the
  // current generator on every rank (so the slices are of one full weight).
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, bool bias, comm::ProcessGroup group,
                           bool gather_output = false);
  // This rank's slice of `full`'s weight and bias (copied). `fused_parts` > 1: the output features are that many
  // equal blocks fused in one layer (attention's q, k and v: 3), each split over the group, so rank r holds slice r
  // of every block, in block order (its own heads' q, k and v) instead of slice r of the concatenation.
  ColumnParallelLinearImpl(const torch::nn::Linear& full, comm::ProcessGroup group, bool gather_output = false,
                           int64_t fused_parts = 1);
  at::Tensor forward(const at::Tensor& x);
  const comm::ProcessGroup& group() const { return group_; }

  at::Tensor weight;  // [out / T, in]
  at::Tensor bias;    // [out / T], undefined without bias
  int64_t in_features = 0, out_features = 0;  // the full layer's
  bool gather_output = false;
  int64_t fused_parts = 1;
  // tp_overlap_comm: backward overlaps the input gradient's all-reduce with the weight gradient (same values).
  bool overlap_comm = false;

 private:
  void take(const torch::nn::Linear& full);
  comm::ProcessGroup group_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, bool bias, comm::ProcessGroup group,
                        bool input_is_parallel = true);
  RowParallelLinearImpl(const torch::nn::Linear& full, comm::ProcessGroup group, bool input_is_parallel = true);
  at::Tensor forward(const at::Tensor& x);
  const comm::ProcessGroup& group() const { return group_; }

  at::Tensor weight;  // [out, in / T]
  at::Tensor bias;    // [out], whole on every rank; undefined without bias
  int64_t in_features = 0, out_features = 0;
  bool input_is_parallel = true;  // false: x is the full input and this rank takes its slice first

 private:
  void take(const torch::nn::Linear& full);
  comm::ProcessGroup group_;
};
TORCH_MODULE(RowParallelLinear);

// An embedding whose rows (the vocabulary) are split over the group: rank r holds rows [r*V/T, (r+1)*V/T). Each rank
// looks up the ids in its range (zeros for the others) and the results are summed over the group, so every rank gets
// the full embedding of every id.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, comm::ProcessGroup group);
  // This rank's rows of `full` (copied).
  VocabParallelEmbeddingImpl(const at::Tensor& full_weight, comm::ProcessGroup group);
  at::Tensor forward(const at::Tensor& ids);
  const comm::ProcessGroup& group() const { return group_; }

  at::Tensor weight;  // [V / T, D]
  int64_t num_embeddings = 0, vocab_begin = 0, vocab_end = 0;

 private:
  comm::ProcessGroup group_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Cross-entropy of logits whose vocabulary is split over the group (`logits` [..., V/T]: this rank's slice, in rank
// order, as a ColumnParallelLinear LM head gives them) against `target` [...] (ids in the full vocabulary): the loss
// of each position, the same on every rank, without gathering the logits (three all-reduces of one value per
// position). Backward gives each rank the gradient of its slice.
// A target equal to `ignore_index` (torch's default, -100: padding) gives loss 0 and no gradient at its position.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        const comm::ProcessGroup& group, int64_t ignore_index = -100);
// Its mean over the positions whose target is not ignore_index: torch's cross_entropy with reduction "mean".
at::Tensor vocab_parallel_cross_entropy_mean(const at::Tensor& logits, const at::Tensor& target,
                                             const comm::ProcessGroup& group, int64_t ignore_index = -100);

// A parameter the layers above split over their group, and how: rank r holds slice r of dimension `dim` (of each of
// `fused_parts` equal blocks along it, in block order, for fused q/k/v).
struct SplitParameter {
  at::Tensor param;
  int64_t dim = 0;
  int64_t fused_parts = 1;
  comm::ProcessGroup group;  // the layer's group: this rank holds slice group.rank() of group.size()
};

// The parameters of `module`'s tree that the layers above split over a tensor-parallel group (column-parallel weights
// and biases, row-parallel weights, vocabulary-parallel embeddings); every other parameter is whole on each rank of
// the group. `group_size` (when given) receives the groups' size, 0 when there is no such layer; layers over groups
// of different sizes are an error.
std::vector<SplitParameter> split_parameters(const torch::nn::Module& module, int* group_size = nullptr);
// split_parameters() by their names in `module`'s named_parameters(): (dim, fused_parts) each. Checkpoints record
// it, so that tensor ranks' slices can be joined (and whole tensors sliced) at another tensor size.
std::map<std::string, std::pair<int64_t, int64_t>> split_layout(const torch::nn::Module& module);
// The tensors of split_parameters().
std::vector<at::Tensor> sharded_parameters(const torch::nn::Module& module, int* group_size = nullptr);
// Sets overlap_comm on every ColumnParallelLinear of `module`'s tree (tensor_parallel.tp_overlap_comm).
void set_overlap_comm(torch::nn::Module& module, bool overlap);


}  // namespace deepspeed::tp
