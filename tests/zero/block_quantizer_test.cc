// qwZ's block-wise int8 (zero/block_quantizer.h): blocks cut at parameter boundaries and every kQuantBlock elements,
// exact where the values sit on the grid, within half a step of each block's own scale elsewhere, a zero block stays
// zero, bf16 in and out.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "counting_allocator.h"
#include "zero/block_quantizer.h"

namespace {

using deepspeed::zero::dequantize_blocks;
using deepspeed::zero::int4_bytes;
using deepspeed::zero::pack_int4;
using deepspeed::zero::unpack_int4;
using deepspeed::zero::kQuantBlock;
using deepspeed::zero::quantization_blocks;
using deepspeed::zero::quantize_blocks;

// Each block of `back` within half its step s (largest |x| in the block / qmax) of `x`, plus fp32's roundings: of s
// itself (relative 2^-24), of x / s (which moves x by up to |x| 2^-24 <= qmax s 2^-24 before rounding to an integer)
// and of q * s (again up to qmax s 2^-24), so s/2 (1 + 2^-24)(1 + 4 qmax 2^-24); and off the grid somewhere (random
// values); with `scales` defined, each is that step.
void expect_within_half_a_step(const at::Tensor& x, const at::Tensor& back, const std::vector<int64_t>& blocks,
                               double qmax, const at::Tensor& scales = at::Tensor()) {
  int64_t start = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const at::Tensor xb = x.narrow(0, start, blocks[b]);
    const double step = xb.abs().max().item<double>() / qmax;
    if (scales.defined()) {
      EXPECT_FLOAT_EQ(scales[b].item<float>(), static_cast<float>(step));
    }
    const double err = (back.narrow(0, start, blocks[b]) - xb).abs().max().item<double>();
    const double u = std::ldexp(1.0, -24);
    EXPECT_LE(err, step / 2 * (1 + u) * (1 + 4 * qmax * u)) << "block " << b;
    EXPECT_GT(err, step / 4) << "block " << b << ": random values are not on the grid";
    start += blocks[b];
  }
}

TEST(BlockQuantizer, BlocksFollowParametersAndPadding) {
  // Parameters of 32 (a norm), 5000 and 100 elements at offsets 0, 32 and 5040 (8 elements of alignment padding
  // before the last, 60 after it up to 5200).
  const std::vector<int64_t> offsets = {0, 32, 5040}, numels = {32, 5000, 100};
  EXPECT_EQ(quantization_blocks(offsets, numels, 0, 5200),
            (std::vector<int64_t>{32, 2048, 2048, 904, 8, 100, 60}));
  // A partition boundary inside the big parameter starts a block there.
  EXPECT_EQ(quantization_blocks(offsets, numels, 2600, 5200), (std::vector<int64_t>{2048, 384, 8, 100, 60}));
  EXPECT_EQ(quantization_blocks(offsets, numels, 10, 20), (std::vector<int64_t>{10}));
}

TEST(BlockQuantizer, ValuesOnTheGridComeBackExactly) {
  // A block whose largest magnitude is 63.5: scale 0.5, every value a multiple of it; then a block of zeros.
  at::Tensor x = at::zeros({40});
  x[0] = 63.5;
  x[1] = -32.0;
  x[2] = 0.5;
  x[3] = -0.5;
  const std::vector<int64_t> blocks = {8, 32};
  at::Tensor q = at::empty({40}, at::kChar), s = at::full({3}, -1.0f);
  quantize_blocks(x, blocks, q, s);
  EXPECT_EQ(s[0].item<float>(), 0.5f);
  EXPECT_EQ(s[1].item<float>(), 0.0f) << "a block of zeros";
  EXPECT_EQ(s[2].item<float>(), -1.0f) << "scales past the blocks are not written";
  EXPECT_EQ(q[0].item<int8_t>(), 127);
  EXPECT_EQ(q[1].item<int8_t>(), -64);
  EXPECT_EQ(q[2].item<int8_t>(), 1);
  at::Tensor back = at::empty_like(x);
  dequantize_blocks(q, s, blocks, back);
  EXPECT_TRUE(at::equal(back, x));
}

// Blocks of magnitudes 1e-3, 1 and 1e3 side by side: each element within half of its own block's step
// (max |x| / 127 / 2, plus the two fp32 roundings of x / s and q * s), so a small block is not flattened by a large
// one.
TEST(BlockQuantizer, EachBlockIsWithinHalfItsOwnStep) {
  at::manual_seed(11);
  const std::vector<int64_t> blocks = {kQuantBlock, 700, 904};
  at::Tensor x = at::randn({kQuantBlock + 700 + 904});
  x.narrow(0, 0, kQuantBlock).mul_(1e-3);
  x.narrow(0, kQuantBlock + 700, 904).mul_(1e3);
  at::Tensor q = at::empty({x.numel()}, at::kChar), s = at::empty({3});
  quantize_blocks(x, blocks, q, s);
  at::Tensor back = at::empty_like(x);
  dequantize_blocks(q, s, blocks, back);
  expect_within_half_a_step(x, back, blocks, 127, s);
}

// A partition of millions of elements is worked through whole blocks at a time, at most 2^20 elements each: every
// block still gets its own scale (blocks on both sides of each chunk edge included), and the temporaries stay within
// one chunk's: per element of a chunk the block index (8 bytes), its fp32 values (4), their magnitudes (4) and the
// divisors (4), 20 MiB, where working on the whole 3.4M elements at once held 51 MiB (measured).
TEST(BlockQuantizer, LargePartitionsWorkInBoundedChunks) {
  at::manual_seed(5);
  std::vector<int64_t> blocks;
  for (int i = 0; i < 1900; ++i) blocks.push_back(i % 7 == 3 ? 100 + i % 50 : kQuantBlock);
  int64_t n = 0;
  for (int64_t b : blocks) n += b;
  ASSERT_GT(n, 3 * (int64_t{1} << 20));
  at::Tensor x = at::randn({n});
  // Magnitudes that differ block to block, so a scale landing on a neighbour's elements shows.
  int64_t start = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    x.narrow(0, start, blocks[b]).mul_(std::pow(2.0, static_cast<double>(b % 9) - 4));
    start += blocks[b];
  }
  at::Tensor q = at::empty({n}, at::kChar), s = at::empty({static_cast<int64_t>(blocks.size())});
  at::Tensor back = at::empty_like(x);
  CountingAllocator counter;
  int64_t quantize_peak = 0, dequantize_peak = 0;
  {
    CountingAllocator::Scope scope(&counter);
    counter.reset_peak();
    quantize_blocks(x, blocks, q, s);
    quantize_peak = counter.peak() - counter.live();
    counter.reset_peak();
    dequantize_blocks(q, s, blocks, back);
    dequantize_peak = counter.peak() - counter.live();
  }
  const int64_t chunk_bound = 20 * (int64_t{1} << 20) + 64 * 1024;  // + the chunk's block lengths and scales
  EXPECT_LE(quantize_peak, chunk_bound);
  EXPECT_LE(dequantize_peak, chunk_bound);
  expect_within_half_a_step(x, back, blocks, 127, s);
}

TEST(BlockQuantizer, Bf16InAndOut) {
  at::Tensor x = at::tensor({2.0f, -1.0f, 3.0f, 0.0f, 127.0f}).to(at::kBFloat16);
  at::Tensor q = at::empty({5}, at::kChar), s = at::empty({1});
  quantize_blocks(x, {5}, q, s);
  EXPECT_EQ(s[0].item<float>(), 1.0f);
  at::Tensor back = at::empty_like(x);
  dequantize_blocks(q, s, {5}, back);
  EXPECT_TRUE(at::equal(back, x)) << "integers up to 127 at scale 1 are exact";
}

// Every int4 value, an odd count (the last byte half padding): two to a byte and back unchanged.
TEST(BlockQuantizer, Int4PacksTwoToAByteAndBack) {
  const at::Tensor q = at::arange(-7, 8, at::kChar);  // 15 values
  at::Tensor packed = at::empty({int4_bytes(15)}, at::kChar);
  ASSERT_EQ(packed.numel(), 8);
  pack_int4(q, packed);
  EXPECT_EQ(packed[0].item<int8_t>(), static_cast<int8_t>(1 + 2 * 16)) << "-7 and -6, offset by 8, low nibble first";
  at::Tensor back = at::empty({15}, at::kChar);
  unpack_int4(packed, back);
  EXPECT_TRUE(at::equal(back, q));
}

// 4 bits: qmax 7, so half a step is max |x| / 14; within it for every element, and exact on the grid.
TEST(BlockQuantizer, Int4IsWithinHalfItsStep) {
  at::manual_seed(12);
  const at::Tensor x = at::randn({3000});
  const std::vector<int64_t> blocks = {kQuantBlock, 952};
  at::Tensor q = at::empty({3000}, at::kChar), s = at::empty({2});
  quantize_blocks(x, blocks, q, s, /*bits=*/4);
  EXPECT_LE(q.abs().max().item<int8_t>(), 7);
  at::Tensor back = at::empty_like(x);
  dequantize_blocks(q, s, blocks, back);
  expect_within_half_a_step(x, back, blocks, 7);
  const at::Tensor grid = at::tensor({7.0f, -3.0f, 0.0f, 1.0f});
  at::Tensor qg = at::empty({4}, at::kChar), sg = at::empty({1}), bg = at::empty({4});
  quantize_blocks(grid, {4}, qg, sg, 4);
  dequantize_blocks(qg, sg, {4}, bg);
  EXPECT_TRUE(at::equal(bg, grid));
}

}  // namespace
