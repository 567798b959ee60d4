// A linear layer's weight held a second time in oneDNN's blocked layout, for inference on a CPU.
//
// LibTorch's CPU `at::linear` goes through MKL's sgemm, which repacks the whole weight on every call: for the few
// rows of a decode step that is most of the time, and on AMD CPUs MKL runs its default (mkl_blas_def_*) kernels.
// oneDNN's inner-product on a weight reordered once (LibTorch's own `mkldnn::_reorder_linear_weight` and
// `mkldnn::_linear_pointwise`, which it registers for its compiler) reads the weight once per call and uses the
// CPU's widest vector units. bench_packed_linear (bench/inference): 1.6-2.9x faster over a 1024-wide Llama's
// layers, from one row to a 256-token prefill; 1.1-2.3x over a 256-wide one's; 2-5x slower over a 64-wide one's at
// 1-16 rows, so small weights are left alone.
//
// The packed copy costs the weight's memory again. It follows in-place changes to the weight (version counters are
// checked on every call and the weight repacked when one moved); a write through a raw pointer is not seen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace deepspeed::ops {

class PackedLinear {
 public:
  // Packs weight [out, in] (and keeps bias [out] or an undefined tensor) when it is a float CPU tensor, or a bfloat16
  // one on a CPU with oneDNN's bfloat16 kernels, this LibTorch has oneDNN's linear ops, and it has at least 65,536
  // elements (below, oneDNN's fixed cost per call loses); otherwise holds nothing (packed() false).
  // DS_PACKED_LINEAR=0 packs nothing, =1 every weight it can, however small.
  // `sources`: the tensors whose in-place changes reach weight, when it shares their storage without their version
  // counters (parameters stacked into one tensor by set_data); weight itself when empty.
  void pack(const at::Tensor& weight, const at::Tensor& bias, std::vector<at::Tensor> sources = {});
  bool packed() const { return packed_.defined(); }
  // x [..., in] -> [..., out], as at::linear(x, weight, bias). Only when packed().
  at::Tensor operator()(const at::Tensor& x);

 private:
  bool stale() const;
  at::Tensor weight_, bias_, packed_;
  std::vector<at::Tensor> sources_;
  std::vector<uint32_t> versions_;  // sources_' version counters when packed_ was made
};

// Whether weights of this dtype and device would be packed (the rule PackedLinear::pack applies).
bool packs_linear_weights(const at::Tensor& weight);

}  // namespace deepspeed::ops
