#include "profiling/op_flops.h"

#include <ATen/core/Tensor.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace deepspeed::profiling::detail {
namespace {

enum class Kind {
  kZero,           // known, costs nothing (embedding, dropout, cross-entropy)
  kLinear,         // (input, weight, bias)
  kMatmul,         // (a, b)
  kAddMatmul,      // (self, a, b): self + a @ b
  kConv,           // conv1d/2d/3d (input, weight, bias, stride, padding, dilation, groups)
  kConvolution,    // (input, weight, bias, stride, padding, dilation, transposed, out_pad, groups)
  kConvTranspose,  // (input, weight, bias, stride, padding, output_padding, groups, dilation)
  kNorm,           // layer_norm / group_norm (input, _, weight, ...)
  kInstanceNorm,   // (input, weight, ...)
  kBatchNorm,      // (input, weight, bias, running_mean, running_var, training, ...)
  kPerElement,     // one flop per input element: softmax, activations, pooling
  kElementwise,    // one flop per element of the broadcast result: add, sub, mul, div
  kAttention,      // scaled_dot_product_attention (q, k, v, ...)
};

const std::unordered_map<std::string_view, Kind>& op_table() {
  static const auto* table = new std::unordered_map<std::string_view, Kind>{
      {"aten::embedding", Kind::kZero},
      {"aten::dropout", Kind::kZero},
      {"aten::dropout_", Kind::kZero},
      {"aten::feature_dropout", Kind::kZero},
      {"aten::alpha_dropout", Kind::kZero},
      {"aten::feature_alpha_dropout", Kind::kZero},
      {"aten::native_dropout", Kind::kZero},
      {"aten::cross_entropy_loss", Kind::kZero},
      {"aten::linear", Kind::kLinear},
      {"aten::matmul", Kind::kMatmul},
      {"aten::mm", Kind::kMatmul},
      {"aten::bmm", Kind::kMatmul},
      {"aten::addmm", Kind::kAddMatmul},
      {"aten::addmm_", Kind::kAddMatmul},
      {"aten::baddbmm", Kind::kAddMatmul},
      {"aten::baddbmm_", Kind::kAddMatmul},
      {"aten::addbmm", Kind::kAddMatmul},
      {"aten::conv1d", Kind::kConv},
      {"aten::conv2d", Kind::kConv},
      {"aten::conv3d", Kind::kConv},
      {"aten::convolution", Kind::kConvolution},
      {"aten::_convolution", Kind::kConvolution},
      {"aten::conv_transpose1d", Kind::kConvTranspose},
      {"aten::conv_transpose2d", Kind::kConvTranspose},
      {"aten::conv_transpose3d", Kind::kConvTranspose},
      {"aten::layer_norm", Kind::kNorm},
      {"aten::group_norm", Kind::kNorm},
      {"aten::instance_norm", Kind::kInstanceNorm},
      {"aten::batch_norm", Kind::kBatchNorm},
      {"aten::softmax", Kind::kPerElement},
      {"aten::_softmax", Kind::kPerElement},
      {"aten::relu", Kind::kPerElement},
      {"aten::relu_", Kind::kPerElement},
      {"aten::relu6", Kind::kPerElement},
      {"aten::relu6_", Kind::kPerElement},
      {"aten::hardtanh", Kind::kPerElement},
      {"aten::hardtanh_", Kind::kPerElement},
      {"aten::gelu", Kind::kPerElement},
      {"aten::gelu_", Kind::kPerElement},
      {"aten::silu", Kind::kPerElement},
      {"aten::silu_", Kind::kPerElement},
      {"aten::elu", Kind::kPerElement},
      {"aten::elu_", Kind::kPerElement},
      {"aten::leaky_relu", Kind::kPerElement},
      {"aten::leaky_relu_", Kind::kPerElement},
      {"aten::prelu", Kind::kPerElement},
      {"aten::avg_pool1d", Kind::kPerElement},
      {"aten::avg_pool2d", Kind::kPerElement},
      {"aten::avg_pool3d", Kind::kPerElement},
      {"aten::max_pool1d", Kind::kPerElement},
      {"aten::max_pool2d", Kind::kPerElement},
      {"aten::max_pool3d", Kind::kPerElement},
      {"aten::adaptive_avg_pool1d", Kind::kPerElement},
      {"aten::adaptive_avg_pool2d", Kind::kPerElement},
      {"aten::adaptive_avg_pool3d", Kind::kPerElement},
      {"aten::adaptive_max_pool1d", Kind::kPerElement},
      {"aten::adaptive_max_pool2d", Kind::kPerElement},
      {"aten::adaptive_max_pool3d", Kind::kPerElement},
      {"aten::add", Kind::kElementwise},
      {"aten::add_", Kind::kElementwise},
      {"aten::sub", Kind::kElementwise},
      {"aten::sub_", Kind::kElementwise},
      {"aten::rsub", Kind::kElementwise},
      {"aten::mul", Kind::kElementwise},
      {"aten::mul_", Kind::kElementwise},
      {"aten::div", Kind::kElementwise},
      {"aten::div_", Kind::kElementwise},
      {"aten::scaled_dot_product_attention", Kind::kAttention},
  };
  return *table;
}

// The defined tensor at `i`, or null.
const at::Tensor* tensor_at(c10::ArrayRef<const c10::IValue> in, size_t i) {
  if (i >= in.size() || !in[i].isTensor()) return nullptr;
  const at::Tensor& t = in[i].toTensor();
  return t.defined() ? &t : nullptr;
}

int64_t numel_at(c10::ArrayRef<const c10::IValue> in, size_t i) {
  const at::Tensor* t = tensor_at(in, i);
  return t ? t->numel() : 0;
}

// An int-list argument expanded to `n` values (a single value repeats); `fallback` when absent.
std::vector<int64_t> ints_at(c10::ArrayRef<const c10::IValue> in, size_t i, size_t n,
                             int64_t fallback) {
  std::vector<int64_t> v;
  if (i < in.size() && in[i].isIntList()) v = in[i].toIntVector();
  if (i < in.size() && in[i].isInt()) v = {in[i].toInt()};
  if (v.empty()) v = {fallback};
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  v.resize(n, v.back());
  return v;
}

int64_t int_at(c10::ArrayRef<const c10::IValue> in, size_t i, int64_t fallback) {
  return i < in.size() && in[i].isInt() ? in[i].toInt() : fallback;
}

// Elements of the shape `a` and `b` broadcast to (the larger size of each aligned dimension).
int64_t broadcast_numel(c10::IntArrayRef a, c10::IntArrayRef b) {
  const size_t n = std::max(a.size(), b.size());
  int64_t numel = 1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    numel *= std::max(da, db);
  }
  return numel;
}

// MACs of a @ b with matmul's rules: a vector operand gains a unit dimension, leading dimensions
// broadcast. For the usual shapes this is DeepSpeed's numel(a) * b.shape[-1].
int64_t matmul_macs(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.empty() || b.empty()) return 0;
  const int64_t k = a.back();
  const int64_t m = a.size() >= 2 ? a[a.size() - 2] : 1;
  const int64_t n = b.size() >= 2 ? b.back() : 1;
  const c10::IntArrayRef batch_a = a.size() > 2 ? a.slice(0, a.size() - 2) : c10::IntArrayRef();
  const c10::IntArrayRef batch_b = b.size() > 2 ? b.slice(0, b.size() - 2) : c10::IntArrayRef();
  return broadcast_numel(batch_a, batch_b) * m * k * n;
}

OpCost products(int64_t macs, int64_t extra_flops = 0) { return {2 * macs + extra_flops, macs}; }

// A convolution: each output position of each output channel takes prod(kernel) x in_channels /
// groups MACs (weight.size(1) is in_channels / groups), plus one flop per output element for the
// bias.
OpCost conv_cost(const at::Tensor& input, const at::Tensor& weight, bool has_bias,
                 c10::ArrayRef<const c10::IValue> in, size_t stride_i, size_t padding_i,
                 size_t dilation_i) {
  const size_t spatial = static_cast<size_t>(weight.dim() - 2);
  const bool batched = static_cast<size_t>(input.dim()) == spatial + 2;
  const int64_t batch = batched ? input.size(0) : 1;
  const auto stride = ints_at(in, stride_i, spatial, 1);
  const auto dilation = ints_at(in, dilation_i, spatial, 1);
  std::vector<int64_t> padding;
  if (padding_i < in.size() && in[padding_i].isString()) {
    // "valid": none; "same": what keeps an odd kernel's output the input's size.
    const bool same = in[padding_i].toStringRef() == "same";
    for (size_t d = 0; d < spatial; ++d)
      padding.push_back(same ? dilation[d] * (weight.size(2 + d) - 1) / 2 : 0);
  } else {
    padding = ints_at(in, padding_i, spatial, 0);
  }
  int64_t positions = batch;
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t size =
        input.size(input.dim() - static_cast<int64_t>(spatial) + static_cast<int64_t>(d));
    const int64_t kernel = weight.size(2 + static_cast<int64_t>(d));
    positions *= (size + 2 * padding[d] - (dilation[d] * (kernel - 1) + 1)) / stride[d] + 1;
  }
  const int64_t out_channels = weight.size(0);
  const int64_t per_position =
      c10::multiply_integers(weight.sizes().slice(2)) * weight.size(1) * out_channels;
  return products(per_position * positions, has_bias ? out_channels * positions : 0);
}

// A transposed convolution: each input position of each input channel feeds prod(kernel) x
// out_channels / groups MACs (weight is [in, out / groups, kernel...]); the bias adds one flop per
// output element.
OpCost conv_transpose_cost(const at::Tensor& input, const at::Tensor& weight, bool has_bias,
                           c10::ArrayRef<const c10::IValue> in, size_t stride_i, size_t padding_i,
                           size_t output_padding_i, size_t dilation_i, size_t groups_i) {
  const size_t spatial = static_cast<size_t>(weight.dim() - 2);
  const bool batched = static_cast<size_t>(input.dim()) == spatial + 2;
  const int64_t batch = batched ? input.size(0) : 1;
  const auto stride = ints_at(in, stride_i, spatial, 1);
  const auto padding = ints_at(in, padding_i, spatial, 0);
  const auto output_padding = ints_at(in, output_padding_i, spatial, 0);
  const auto dilation = ints_at(in, dilation_i, spatial, 1);
  const int64_t groups = int_at(in, groups_i, 1);
  int64_t in_positions = batch, out_positions = batch;
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t size =
        input.size(input.dim() - static_cast<int64_t>(spatial) + static_cast<int64_t>(d));
    const int64_t kernel = weight.size(2 + static_cast<int64_t>(d));
    in_positions *= size;
    out_positions *= (size - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel - 1) +
                     output_padding[d] + 1;
  }
  const int64_t in_channels = weight.size(0);
  const int64_t out_channels = weight.size(1) * groups;
  const int64_t macs =
      c10::multiply_integers(weight.sizes().slice(2)) * in_channels * weight.size(1) * in_positions;
  return products(macs, has_bias ? out_channels * out_positions : 0);
}

OpCost cost_of(Kind kind, c10::ArrayRef<const c10::IValue> in) {
  switch (kind) {
    case Kind::kZero:
      return {};
    case Kind::kLinear: {
      const at::Tensor* x = tensor_at(in, 0);
      const at::Tensor* w = tensor_at(in, 1);
      if (!x || !w || w->dim() < 1) return {};
      return products(x->numel() * w->size(0));  // DeepSpeed leaves the bias out of linear's count
    }
    case Kind::kMatmul: {
      const at::Tensor* a = tensor_at(in, 0);
      const at::Tensor* b = tensor_at(in, 1);
      return a && b ? products(matmul_macs(a->sizes(), b->sizes())) : OpCost{};
    }
    case Kind::kAddMatmul: {
      // DeepSpeed: 2 x MACs + the numel of the added tensor as given (a bias vector adds its own
      // size).
      const at::Tensor* a = tensor_at(in, 1);
      const at::Tensor* b = tensor_at(in, 2);
      return a && b ? products(matmul_macs(a->sizes(), b->sizes()), numel_at(in, 0)) : OpCost{};
    }
    case Kind::kConv: {
      const at::Tensor* x = tensor_at(in, 0);
      const at::Tensor* w = tensor_at(in, 1);
      if (!x || !w || w->dim() < 3) return {};
      return conv_cost(*x, *w, tensor_at(in, 2) != nullptr, in, 3, 4, 5);
    }
    case Kind::kConvolution: {
      const at::Tensor* x = tensor_at(in, 0);
      const at::Tensor* w = tensor_at(in, 1);
      if (!x || !w || w->dim() < 3) return {};
      const bool transposed = in.size() > 6 && in[6].isBool() && in[6].toBool();
      if (transposed)
        return conv_transpose_cost(*x, *w, tensor_at(in, 2) != nullptr, in, 3, 4, 7, 5, 8);
      return conv_cost(*x, *w, tensor_at(in, 2) != nullptr, in, 3, 4, 5);
    }
    case Kind::kConvTranspose: {
      const at::Tensor* x = tensor_at(in, 0);
      const at::Tensor* w = tensor_at(in, 1);
      if (!x || !w || w->dim() < 3) return {};
      return conv_transpose_cost(*x, *w, tensor_at(in, 2) != nullptr, in, 3, 4, 5, 7, 6);
    }
    case Kind::kNorm:  // DeepSpeed's estimate: 4 flops per element to normalise, 1 more for the
                       // affine transform
      return {numel_at(in, 0) * (tensor_at(in, 2) ? 5 : 4), 0};
    case Kind::kInstanceNorm:
      return {numel_at(in, 0) * (tensor_at(in, 1) ? 5 : 4), 0};
    case Kind::kBatchNorm: {
      const bool affine = tensor_at(in, 1) != nullptr;
      const bool training = in.size() > 5 && in[5].isBool() && in[5].toBool();
      return {numel_at(in, 0) * (training ? (affine ? 5 : 4) : (affine ? 2 : 1)), 0};
    }
    case Kind::kPerElement:
      return {numel_at(in, 0), 0};
    case Kind::kElementwise: {
      const at::Tensor* a = tensor_at(in, 0);
      const at::Tensor* b = tensor_at(in, 1);
      if (a && b) return {broadcast_numel(a->sizes(), b->sizes()), 0};
      if (a || b) return {(a ? a : b)->numel(), 0};
      return {1, 0};
    }
    case Kind::kAttention: {
      // scores = q @ k^T, then scores @ v.
      const at::Tensor* q = tensor_at(in, 0);
      const at::Tensor* k = tensor_at(in, 1);
      const at::Tensor* v = tensor_at(in, 2);
      if (!q || !k || !v || q->dim() < 2 || k->dim() < 2) return {};
      const int64_t keys = k->size(-2);
      return products(q->numel() * keys + q->numel() / q->size(-1) * keys * v->size(-1));
    }
  }
  return {};
}

}  // namespace

bool op_cost(std::string_view name, c10::ArrayRef<const c10::IValue> inputs, OpCost* cost) {
  const auto& table = op_table();
  auto it = table.find(name);
  if (it == table.end()) return false;
  *cost = cost_of(it->second, inputs);
  return true;
}

}  // namespace deepspeed::profiling::detail
