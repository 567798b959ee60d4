// ZeRO++'s wire formats: symmetric integers with one fp32 scale per block (the block's largest magnitude / qmax),
// dequantized on arrival. qwZ (zero_quantized_weights) sends parameters as int8 (qmax 127); qgZ
// (zero_quantized_gradients) sends gradients as int4 (qmax 7), two to a byte. Blocks follow the parameters: each
// parameter's piece of a partition (and each gap of padding) is cut into blocks of at most kQuantBlock elements, so a
// LayerNorm's ones never share a block, and a step, with a projection's 0.02s. Each element comes back within half
// its block's step of its value; a block of zeros stays zeros. DeepSpeed's kernels cut the flat buffer into groups
// whatever it holds. With 2048 the scales add 0.2% to the int8 bytes (0.4% to int4's), plus one per piece a
// partition boundary or a small parameter makes. ATen ops: any device.
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

// `x` (any floating dtype, contiguous, sum(blocks) elements) into `q` (int8 holding values in [-qmax, qmax], as
// many) and the first blocks.size() elements of `scales` (fp32), on x's device. `bits` 8 (qmax 127) or 4 (qmax 7).
void quantize_blocks(const at::Tensor& x, const std::vector<int64_t>& blocks, at::Tensor q, at::Tensor scales,
                     int bits = 8);

// The way back: `out` (any floating dtype, q.numel() elements) = each value times its block's scale, rounded to out's
// dtype.
void dequantize_blocks(const at::Tensor& q, const at::Tensor& scales, const std::vector<int64_t>& blocks,
                       at::Tensor out);

// int4 values in [-7, 7] (int8 tensor of n elements) two to a byte, offset by 8 (low nibble first; an odd n pads
// the last byte); and back. Bytes: (n + 1) / 2.
int64_t int4_bytes(int64_t n);
void pack_int4(const at::Tensor& q, at::Tensor packed);
void unpack_int4(const at::Tensor& packed, at::Tensor q);

}  // namespace deepspeed::zero
