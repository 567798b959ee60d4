// ZeRO++ qwZ's wire format (zero_quantized_weights): a partition of parameters travels as symmetric int8, one fp32
// scale per block (the block's largest magnitude / 127), and is dequantized on arrival. Blocks follow the
// parameters: each parameter's piece of the partition (and each gap of padding) is cut into blocks of at most
// kQuantBlock elements, so a LayerNorm's ones never share a block, and a step, with a projection's 0.02s. Each element
// comes back within half its block's step of its value; a block of zeros stays zeros. DeepSpeed's kernel cuts the
// flat buffer into groups of 4k-16k elements whatever it holds. With 2048 the scales add 0.2% to the int8 bytes, so a
// bf16 gather sends about 0.501 of its bytes and an fp32 one 0.25 (plus a scale per piece a partition boundary or
// small parameter makes). ATen ops: any device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace deepspeed::zero {

constexpr int64_t kQuantBlock = 2048;

// The blocks of the flat range [begin, end) holding parameters at `offsets` of `numels` elements (sorted, disjoint;
// what lies between or after them is padding): their lengths, in order, summing to end - begin.
std::vector<int64_t> quantization_blocks(const std::vector<int64_t>& offsets, const std::vector<int64_t>& numels,
                                         int64_t begin, int64_t end);

// `x` (any floating dtype, contiguous, sum(blocks) elements) into `q` (int8, as many) and the first blocks.size()
// elements of `scales` (fp32), on x's device.
void quantize_blocks(const at::Tensor& x, const std::vector<int64_t>& blocks, at::Tensor q, at::Tensor scales);

// The way back: `out` (any floating dtype, q.numel() elements) = each value times its block's scale, rounded to out's
// dtype.
void dequantize_blocks(const at::Tensor& q, const at::Tensor& scales, const std::vector<int64_t>& blocks,
                       at::Tensor out);

}  // namespace deepspeed::zero
