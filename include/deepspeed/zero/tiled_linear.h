// DeepSpeed's TiledLinear: one linear layer split into out_splits x in_splits tiles, each tile its
// own ZeRO stage-3 unit (a zero::shard'ed torch::nn::Linear), so a layer larger than what a rank
// can hold gathered passes through stage 3 one tile at a time (bounded by
// stage3_max_live_parameters) instead of all at once.
//
// Tile (o, i) maps input features in_parts()[i] .. in_parts()[i+1] to output features
// out_parts()[o] .. out_parts()[o+1]; the parts are DeepSpeed's partition_uniform (the first
// `features % splits` parts one larger). Forward sums the tiles of each output split over the input
// splits (in input-split order) and concatenates the output splits along the last dimension, so y =
// x W^T + b as torch::nn::Linear, up to summation order. Only the last tile of each output split (i
// = in_splits - 1) has a bias. Parameter names are DeepSpeed's: linears.<o>.<i>.weight / .bias.
//
// Each tile is initialised by torch::nn::Linear's own rule for the tile's shape, so a fresh
// TiledLinear does not draw the same values as a fresh Linear; copy_params_from(linear) makes them
// equal (DeepSpeed's init_linear). Built inside a zero::Init scope, each tile is partitioned as
// soon as it is built, so no rank ever holds the whole layer. DeepSpeed's linear_cls, init_linear
// and **kwargs are not provided: tiles are torch::nn::Linear, and copy_params_from takes the place
// of init_linear.
//
// Thread-safety: as any torch::nn::Module; at stage 3 driven by the engine's one training thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch::nn {
class LinearImpl;
}  // namespace torch::nn

namespace deepspeed::zero {

class UnitBase;

// The constructor arguments of DeepSpeed's TiledLinear (same names and defaults).
struct TiledLinearOptions {
  TiledLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  TORCH_ARG(int64_t, in_splits) = 1;
  TORCH_ARG(int64_t, out_splits) = 1;
  // forward_split() receives in_splits tensors, already split along the last dimension (e.g. the
  // output of a TiledLinear with combine_out_splits = false and out_splits equal to this layer's
  // in_splits).
  TORCH_ARG(bool, input_is_already_split) = false;
  // false: forward_split() returns the out_splits outputs separately instead of one concatenated
  // tensor.
  TORCH_ARG(bool, combine_out_splits) = true;
};

class TiledLinearImpl : public torch::nn::Module {
 public:
  // Throws deepspeed::Error naming the option for features < 1, splits < 1 or more splits than
  // features.
  explicit TiledLinearImpl(const TiledLinearOptions& options);
  TiledLinearImpl(int64_t in_features, int64_t out_features)
      : TiledLinearImpl(TiledLinearOptions(in_features, out_features)) {}

  // [..., in_features] -> [..., out_features]. For the default input_is_already_split = false and
  // combine_out_splits = true; other settings go through forward_split().
  at::Tensor forward(const at::Tensor& input);
  // DeepSpeed's forward for every setting: `inputs` is {input} or, with input_is_already_split, the
  // in_splits parts (each [..., in_parts()[i+1] - in_parts()[i]]); the result is {output} or,
  // without combine_out_splits, the out_splits parts.
  std::vector<at::Tensor> forward_split(const std::vector<at::Tensor>& inputs);

  // Copies `other`'s weight [out_features, in_features] (and bias, which `other` must have exactly
  // when this layer has one) into the tiles, one tile gathered at a time; at stage 3 rank 0's
  // values are kept (DeepSpeed's GatheredParameters(modifier_rank=0)). Collective at stage 3: every
  // rank calls it. At stages 0-2 call it before deepspeed::initialize, as the optimizer keeps its
  // own copy of the weights from then on.
  void copy_params_from(const torch::nn::LinearImpl& other);
  // The inverse: writes the full layer into `other` (same shape and bias rule), gathering one tile
  // at a time, on every rank. Collective at stage 3.
  void copy_params_to(torch::nn::LinearImpl& other);

  const TiledLinearOptions& options() const { return options_; }
  // Split boundaries: in_splits + 1 (out_splits + 1) offsets from 0 to in_features (out_features).
  const std::vector<int64_t>& in_parts() const { return in_parts_; }
  const std::vector<int64_t>& out_parts() const { return out_parts_; }
  // Tile (out_id, in_id): the unit wrapper, and the torch::nn::Linear it wraps.
  std::shared_ptr<UnitBase> tile_unit(int64_t out_id, int64_t in_id) const;
  torch::nn::LinearImpl& tile(int64_t out_id, int64_t in_id) const;

  void pretty_print(std::ostream& stream) const override;

 private:
  size_t tile_index(int64_t out_id, int64_t in_id) const;

  TiledLinearOptions options_;
  std::vector<int64_t> in_parts_, out_parts_;
  std::vector<std::shared_ptr<UnitBase>> tiles_;  // row-major: out_id * in_splits + in_id
};
TORCH_MODULE(TiledLinear);

}  // namespace deepspeed::zero
