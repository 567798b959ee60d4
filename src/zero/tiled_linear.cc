// TiledLinear (include/deepspeed/zero/tiled_linear.h): tiles built as stage-3 units, the
// split/sum/concatenate forward, and the copies to and from a whole torch::nn::Linear through one
// tile's GatheredParameters at a time.
#include "deepspeed/zero/tiled_linear.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <ostream>
#include <string>

#include "deepspeed/error.h"
#include "deepspeed/zero.h"

namespace deepspeed::zero {
namespace {

using Tile = ShardedImpl<torch::nn::LinearImpl>;

// DeepSpeed's partition_uniform: `splits` + 1 boundaries, the first `items % splits` parts one
// larger.
std::vector<int64_t> partition_uniform(int64_t items, int64_t splits) {
  std::vector<int64_t> parts(splits + 1, 0);
  const int64_t chunk = items / splits, residual = items % splits;
  for (int64_t p = 0; p < splits; ++p) parts[p + 1] = parts[p] + chunk + (p < residual ? 1 : 0);
  return parts;
}

void check_split(const char* splits_name, int64_t splits, const char* features_name,
                 int64_t features) {
  DS_CHECK(features >= 1, "TiledLinear: ", features_name, " must be >= 1, got ", features);
  DS_CHECK(splits >= 1, "TiledLinear: ", splits_name, " must be >= 1, got ", splits);
  DS_CHECK(splits <= features, "TiledLinear: ", splits_name, " (", splits,
           ") must be <= ", features_name, " (", features, "): a tile cannot be empty");
}

}  // namespace

TiledLinearImpl::TiledLinearImpl(const TiledLinearOptions& options) : options_(options) {
  check_split("in_splits", options_.in_splits(), "in_features", options_.in_features());
  check_split("out_splits", options_.out_splits(), "out_features", options_.out_features());
  in_parts_ = partition_uniform(options_.in_features(), options_.in_splits());
  out_parts_ = partition_uniform(options_.out_features(), options_.out_splits());
  auto linears = register_module("linears", torch::nn::ModuleList());
  for (int64_t o = 0; o < options_.out_splits(); ++o) {
    torch::nn::ModuleList row;
    for (int64_t i = 0; i < options_.in_splits(); ++i) {
      // The input splits' partial products are summed, so one bias per output split is enough.
      const bool bias = options_.bias() && i == options_.in_splits() - 1;
      auto lin = torch::nn::LinearOptions(in_parts_[i + 1] - in_parts_[i],
                                          out_parts_[o + 1] - out_parts_[o]);
      // Built through the factory so that inside zero::Init each tile is partitioned before the
      // next one exists.
      std::shared_ptr<Tile> tile = shard([&] { return torch::nn::Linear(lin.bias(bias)); });
      row->push_back(tile);
      tiles_.push_back(tile);
    }
    linears->push_back(row);
  }
}

size_t TiledLinearImpl::tile_index(int64_t out_id, int64_t in_id) const {
  DS_CHECK(
      out_id >= 0 && out_id < options_.out_splits() && in_id >= 0 && in_id < options_.in_splits(),
      "TiledLinear: tile (", out_id, ", ", in_id, ") out of range for out_splits ",
      options_.out_splits(), ", in_splits ", options_.in_splits());
  return static_cast<size_t>(out_id * options_.in_splits() + in_id);
}

std::shared_ptr<UnitBase> TiledLinearImpl::tile_unit(int64_t out_id, int64_t in_id) const {
  return tiles_[tile_index(out_id, in_id)];
}

torch::nn::LinearImpl& TiledLinearImpl::tile(int64_t out_id, int64_t in_id) const {
  return std::static_pointer_cast<Tile>(tiles_[tile_index(out_id, in_id)])->module();
}

at::Tensor TiledLinearImpl::forward(const at::Tensor& input) {
  DS_CHECK(!options_.input_is_already_split() && options_.combine_out_splits(),
           "TiledLinear::forward takes one tensor and returns one; with input_is_already_split = "
           "true or "
           "combine_out_splits = false call forward_split()");
  return forward_split({input})[0];
}

std::vector<at::Tensor> TiledLinearImpl::forward_split(const std::vector<at::Tensor>& inputs) {
  const int64_t in_splits = options_.in_splits(), out_splits = options_.out_splits();
  std::vector<at::Tensor> parts;
  if (options_.input_is_already_split()) {
    DS_CHECK(static_cast<int64_t>(inputs.size()) == in_splits,
             "TiledLinear: input_is_already_split expects ", in_splits,
             " input tensors (in_splits), got ", inputs.size());
    parts = inputs;
  } else {
    DS_CHECK(inputs.size() == 1,
             "TiledLinear: expects one input tensor (input_is_already_split = false), got ",
             inputs.size());
    const at::Tensor& x = inputs[0];
    DS_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features(),
             "TiledLinear: input's last dimension must be ",
             "in_features = ", options_.in_features(), ", got shape ", x.sizes());
    for (int64_t i = 0; i < in_splits; ++i)
      parts.push_back(x.narrow(-1, in_parts_[i], in_parts_[i + 1] - in_parts_[i]));
  }
  for (int64_t i = 0; i < in_splits; ++i) {
    const int64_t want = in_parts_[i + 1] - in_parts_[i];
    DS_CHECK(parts[i].dim() >= 1 && parts[i].size(-1) == want, "TiledLinear: input split ", i,
             " must have last dimension ", want, ", got shape ", parts[i].sizes());
  }

  std::vector<at::Tensor> outputs;
  for (int64_t o = 0; o < out_splits; ++o) {
    at::Tensor sum;
    for (int64_t i = 0; i < in_splits; ++i) {
      at::Tensor y = std::static_pointer_cast<Tile>(tiles_[tile_index(o, i)])->forward(parts[i]);
      sum = sum.defined() ? sum + y : y;
    }
    outputs.push_back(sum);
  }
  if (options_.combine_out_splits() && out_splits > 1) return {at::cat(outputs, -1)};
  return outputs;
}

namespace {

// `other` must be the whole layer: weight [out_features, in_features], a bias [out_features]
// exactly when the TiledLinear has one.
void check_whole_linear(const char* what, const TiledLinearOptions& opt,
                        const torch::nn::LinearImpl& other) {
  const at::Tensor& w = other.weight;
  DS_CHECK(w.dim() == 2 && w.size(0) == opt.out_features() && w.size(1) == opt.in_features(),
           "TiledLinear::", what, ": weight must be [out_features, in_features] = [",
           opt.out_features(), ", ", opt.in_features(), "], got ", w.sizes());
  DS_CHECK(other.bias.defined() == opt.bias(), "TiledLinear::", what,
           ": this layer has bias = ", opt.bias() ? "true" : "false", " but the Linear ",
           other.bias.defined() ? "has" : "has no", " bias");
  DS_CHECK(
      !other.bias.defined() || (other.bias.dim() == 1 && other.bias.size(0) == opt.out_features()),
      "TiledLinear::", what, ": bias must be [out_features] = [", opt.out_features(), "], got ",
      other.bias.sizes());
}

// Calls fn(tile, block of the whole weight, block of the whole bias or undefined) for every tile
// while only that tile is gathered, so the whole layer never is; `modifier_rank` as
// GatheredParameters.
template <typename Fn>
void for_each_tile_gathered(const TiledLinearImpl& tiled, const at::Tensor& weight,
                            const at::Tensor& bias, int modifier_rank, Fn fn) {
  at::NoGradGuard no_grad;
  const auto &outs = tiled.out_parts(), &ins = tiled.in_parts();
  for (size_t o = 0; o + 1 < outs.size(); ++o) {
    for (size_t i = 0; i + 1 < ins.size(); ++i) {
      torch::nn::LinearImpl& t = tiled.tile(o, i);
      GatheredParameters gathered(*tiled.tile_unit(o, i), modifier_rank);
      at::Tensor w =
          weight.narrow(0, outs[o], outs[o + 1] - outs[o]).narrow(1, ins[i], ins[i + 1] - ins[i]);
      at::Tensor b =
          t.bias.defined() ? bias.narrow(0, outs[o], outs[o + 1] - outs[o]) : at::Tensor();
      fn(t, w, b);
      gathered.release();
    }
  }
}

}  // namespace

void TiledLinearImpl::copy_params_from(const torch::nn::LinearImpl& other) {
  check_whole_linear("copy_params_from", options_, other);
  // Rank 0's values are partitioned back (DeepSpeed's GatheredParameters(modifier_rank=0)).
  for_each_tile_gathered(*this, other.weight, other.bias, /*modifier_rank=*/0,
                         [](torch::nn::LinearImpl& t, const at::Tensor& w, const at::Tensor& b) {
                           t.weight.copy_(w);
                           if (b.defined()) t.bias.copy_(b);
                         });
}

void TiledLinearImpl::copy_params_to(torch::nn::LinearImpl& other) {
  check_whole_linear("copy_params_to", options_, other);
  for_each_tile_gathered(*this, other.weight, other.bias, /*modifier_rank=*/-1,
                         [](torch::nn::LinearImpl& t, at::Tensor w, at::Tensor b) {
                           w.copy_(t.weight);
                           if (b.defined()) b.copy_(t.bias);
                         });
}

void TiledLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "deepspeed::zero::TiledLinear(in_features=" << options_.in_features()
         << ", out_features=" << options_.out_features()
         << ", bias=" << (options_.bias() ? "true" : "false")
         << ", in_splits=" << options_.in_splits() << ", out_splits=" << options_.out_splits()
         << ")";
}

}  // namespace deepspeed::zero
