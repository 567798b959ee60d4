#include "zero/weight_quantizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

// Each element's block index, for gathers and scatters by block.
at::Tensor block_index(const std::vector<int64_t>& blocks, const at::Device& device) {
  const at::Tensor lengths = at::tensor(blocks, at::kLong);
  return at::repeat_interleave(at::arange(static_cast<int64_t>(blocks.size()), at::kLong), lengths).to(device);
}

int64_t total(const std::vector<int64_t>& blocks) {
  int64_t n = 0;
  for (int64_t b : blocks) n += b;
  return n;
}

}  // namespace

std::vector<int64_t> quantization_blocks(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                                         int64_t begin, int64_t end) {
  // Cut points: every parameter's start and end inside the range, then each piece into kQuantBlock chunks.
  std::vector<int64_t> cuts = {begin, end};
  for (size_t i = 0; i < offsets.size(); ++i)
    for (int64_t edge : {offsets[i], offsets[i] + numels[i]})
      if (edge > begin && edge < end) cuts.push_back(edge);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<int64_t> out;
  for (size_t c = 0; c + 1 < cuts.size(); ++c)
    for (int64_t pos = cuts[c]; pos < cuts[c + 1]; pos += kQuantBlock)
      out.push_back(std::min(kQuantBlock, cuts[c + 1] - pos));
  return out;
}

void quantize_blocks(const at::Tensor& x, const std::vector<int64_t>& blocks, at::Tensor q, at::Tensor scales) {
  const int64_t numel = x.numel();
  const int64_t n = static_cast<int64_t>(blocks.size());
  DS_ASSERT(total(blocks) == numel && q.scalar_type() == at::kChar && q.numel() == numel &&
                scales.scalar_type() == at::kFloat && scales.numel() >= n,
            "quantize_blocks: ", n, " blocks over ", numel, " elements into ", q.numel(), " values and ",
            scales.numel(), " scales");
  if (numel == 0) return;
  const at::Tensor index = block_index(blocks, x.device());
  const at::Tensor values = x.reshape({-1}).to(at::kFloat);
  const at::Tensor scale =
      at::zeros({n}, values.options()).scatter_reduce_(0, index, values.abs(), "amax").div_(127.0f);
  scales.narrow(0, 0, n).copy_(scale);
  // A block of zeros has scale 0: divide by the smallest normal instead, which keeps its zeros zeros.
  const at::Tensor divisor = scale.clamp_min(std::numeric_limits<float>::min()).index_select(0, index);
  q.view({-1}).copy_(values.div(divisor).round_().clamp_(-127, 127));
}

void dequantize_blocks(const at::Tensor& q, const at::Tensor& scales, const std::vector<int64_t>& blocks,
                       at::Tensor out) {
  const int64_t numel = q.numel();
  DS_ASSERT(total(blocks) == numel && out.numel() == numel &&
                scales.numel() >= static_cast<int64_t>(blocks.size()),
            "dequantize_blocks: ", blocks.size(), " blocks over ", numel, " elements into ", out.numel());
  if (numel == 0) return;
  const at::Tensor index = block_index(blocks, q.device());
  out.view({-1}).copy_(q.reshape({-1}).to(at::kFloat).mul_(scales.index_select(0, index)));
}

}  // namespace deepspeed::zero
