#include "zero/block_quantizer.h"

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

// Whole blocks at a time, at most kChunkElements (or one block) each: the per-element temporaries (the block index at
// 8 bytes, the fp32 values and divisors) stay bounded by the chunk whatever the partition's size.
constexpr int64_t kChunkElements = int64_t{1} << 20;

struct Chunk {
  int64_t offset = 0, numel = 0, first_block = 0;
  std::vector<int64_t> blocks;
};

template <typename F>
void for_each_chunk(const std::vector<int64_t>& blocks, F&& body) {
  Chunk c;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (!c.blocks.empty() && c.numel + blocks[b] > kChunkElements) {
      body(c);
      c.offset += c.numel;
      c.first_block += static_cast<int64_t>(c.blocks.size());
      c.numel = 0;
      c.blocks.clear();
    }
    c.blocks.push_back(blocks[b]);
    c.numel += blocks[b];
  }
  if (!c.blocks.empty()) body(c);
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

void quantize_blocks(const at::Tensor& x, const std::vector<int64_t>& blocks, at::Tensor q, at::Tensor scales,
                     int bits) {
  DS_ASSERT(bits == 8 || bits == 4, "quantize_blocks: 8 or 4 bits, got ", bits);
  const double qmax = bits == 8 ? 127.0 : 7.0;
  const int64_t numel = x.numel();
  const int64_t n = static_cast<int64_t>(blocks.size());
  DS_ASSERT(total(blocks) == numel && q.scalar_type() == at::kChar && q.numel() == numel &&
                scales.scalar_type() == at::kFloat && scales.numel() >= n,
            "quantize_blocks: ", n, " blocks over ", numel, " elements into ", q.numel(), " values and ",
            scales.numel(), " scales");
  const at::Tensor flat_x = x.reshape({-1});
  const at::Tensor flat_q = q.view({-1});
  for_each_chunk(blocks, [&](const Chunk& c) {
    const at::Tensor index = block_index(c.blocks, x.device());
    const at::Tensor values = flat_x.narrow(0, c.offset, c.numel).to(at::kFloat);
    const int64_t m = static_cast<int64_t>(c.blocks.size());
    const at::Tensor scale =
        at::zeros({m}, values.options()).scatter_reduce_(0, index, values.abs(), "amax").div_(qmax);
    scales.narrow(0, c.first_block, m).copy_(scale);
    // A block of zeros has scale 0: divide by the smallest normal instead, which keeps its zeros zeros.
    const at::Tensor divisor = scale.clamp_min(std::numeric_limits<float>::min()).index_select(0, index);
    flat_q.narrow(0, c.offset, c.numel).copy_(values.div(divisor).round_().clamp_(-qmax, qmax));
  });
}

void dequantize_blocks(const at::Tensor& q, const at::Tensor& scales, const std::vector<int64_t>& blocks,
                       at::Tensor out) {
  const int64_t numel = q.numel();
  DS_ASSERT(total(blocks) == numel && out.numel() == numel &&
                scales.numel() >= static_cast<int64_t>(blocks.size()),
            "dequantize_blocks: ", blocks.size(), " blocks over ", numel, " elements into ", out.numel());
  const at::Tensor flat_q = q.reshape({-1});
  const at::Tensor flat_out = out.view({-1});
  for_each_chunk(blocks, [&](const Chunk& c) {
    const at::Tensor index = block_index(c.blocks, q.device());
    const at::Tensor block_scales = scales.narrow(0, c.first_block, static_cast<int64_t>(c.blocks.size()));
    flat_out.narrow(0, c.offset, c.numel)
        .copy_(flat_q.narrow(0, c.offset, c.numel).to(at::kFloat).mul_(block_scales.index_select(0, index)));
  });
}

int64_t int4_bytes(int64_t n) { return (n + 1) / 2; }

void pack_int4(const at::Tensor& q, at::Tensor packed) {
  const int64_t n = q.numel();
  DS_ASSERT(packed.numel() == int4_bytes(n) && packed.scalar_type() == at::kChar, "pack_int4: ", n, " values");
  at::Tensor nibbles = at::full({2 * int4_bytes(n)}, 8, q.options().dtype(at::kShort));  // a pad nibble reads 0
  nibbles.narrow(0, 0, n).add_(q.reshape({-1}).to(at::kShort));
  const at::Tensor pairs = nibbles.view({-1, 2});
  const at::Tensor bytes = pairs.select(1, 0) + pairs.select(1, 1) * 16;  // 0..255
  // int8's bit pattern of the byte value (two's complement), as the wire carries bytes.
  packed.copy_(at::where(bytes > 127, bytes - 256, bytes));
}

void unpack_int4(const at::Tensor& packed, at::Tensor q) {
  const int64_t n = q.numel();
  DS_ASSERT(packed.numel() == int4_bytes(n) && q.scalar_type() == at::kChar, "unpack_int4: ", n, " values");
  const at::Tensor bytes = packed.to(at::kShort).bitwise_and(255);
  const at::Tensor pairs = at::stack({bytes.bitwise_and(15), bytes.bitwise_right_shift(4)}, 1).sub_(8);
  q.view({-1}).copy_(pairs.view({-1}).narrow(0, 0, n));
}

}  // namespace deepspeed::zero
