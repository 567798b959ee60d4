// ops::paged_decode_attention (deepspeed/ops/paged_attention.h) against LibTorch's scaled_dot_product_attention
// over each sequence's keys gathered with index_select, at every SIMD level this CPU runs. The bugs it is for: a
// wrong slot (block table, block boundary, key/value head for a query head under grouped-query attention), a
// softmax over the wrong span (one position too many or too few), a vector loop's tail dropped (a head size that is
// not a multiple of the vector width), a write to another sequence's row, and bfloat16 read or rounded wrongly.
#include "deepspeed/ops/paged_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "deepspeed/ops/simd.h"
#include "scoped_env.h"
#include "tolerance.h"

namespace {

namespace ops = deepspeed::ops;
namespace tol = tolerance;

struct Case {
  int64_t heads, kv_heads, dim, block_size;
  std::vector<int64_t> lengths;
};

// Runs one case at the current SIMD level; returns the worst relative error over the sequences against SDPA and
// checks that rows no sequence owns stay as they were.
void check(const Case& c, at::ScalarType dtype) {
  at::manual_seed(7);
  const int64_t blocks = 64, count = static_cast<int64_t>(c.lengths.size()), rows = 2 * count + 1;
  const at::Tensor keys = at::randn({blocks, c.block_size, c.kv_heads, c.dim}).to(dtype);
  const at::Tensor values = at::randn({blocks, c.block_size, c.kv_heads, c.dim}).to(dtype);
  // [T, heads, dim] in memory, seen as [heads, T, dim]: the layout the model's rotated queries have.
  const at::Tensor q = at::randn({rows, c.heads, c.dim}).to(dtype).transpose(0, 1);
  at::Tensor out = at::full({rows, c.heads, c.dim}, NAN, at::TensorOptions().dtype(dtype)).transpose(0, 1);
  // Each sequence's blocks: a random choice out of the cache, in random order.
  const at::Tensor order = at::randperm(blocks, at::kLong);
  std::vector<std::vector<int64_t>> tables;
  std::vector<ops::PagedDecodeSequence> seqs;
  int64_t next = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = c.lengths[static_cast<size_t>(i)];
    const int64_t n = (length + c.block_size - 1) / c.block_size;
    tables.emplace_back(order.data_ptr<int64_t>() + next, order.data_ptr<int64_t>() + next + n);
    next += n;
  }
  for (int64_t i = 0; i < count; ++i)
    seqs.push_back({2 * i + 1, c.lengths[static_cast<size_t>(i)], tables[static_cast<size_t>(i)].data()});
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  ops::paged_decode_attention(q, keys, values, seqs, scale, out);

  const at::Tensor flat_k = keys.reshape({-1, c.kv_heads, c.dim}), flat_v = values.reshape({-1, c.kv_heads, c.dim});
  for (int64_t i = 0; i < count; ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i << " of length " << seqs[static_cast<size_t>(i)].length);
    const ops::PagedDecodeSequence& s = seqs[static_cast<size_t>(i)];
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < s.length; ++p)
      slots.push_back(s.blocks[p / c.block_size] * c.block_size + p % c.block_size);
    const at::Tensor idx = at::tensor(slots, at::kLong);
    const at::Tensor k = flat_k.index_select(0, idx).transpose(0, 1).unsqueeze(0);  // [1, kv, L, dim]
    const at::Tensor v = flat_v.index_select(0, idx).transpose(0, 1).unsqueeze(0);
    const at::Tensor qi = q.select(1, s.row).unsqueeze(1).unsqueeze(0);  // [1, heads, 1, dim]
    const at::Tensor want = at::scaled_dot_product_attention(qi, k, v, {}, 0.0, false, scale, c.heads != c.kv_heads)
                                .reshape({c.heads, c.dim});
    const at::Tensor got = out.select(1, s.row);
    // Scores are sums of dim products, the output a sum of L weighted values: two chained sums in another order.
    // In bfloat16 LibTorch also rounds the softmax weights to bfloat16 before their sum, and both sides round the
    // result: half an epsilon each.
    const double bound =
        tol::reordered(tol::kFp32Epsilon, c.dim + s.length, 2) + (dtype == at::kBFloat16 ? tol::kBf16Epsilon : 0.0);
    EXPECT_WITHIN(tol::relative_max_error(got.to(at::kFloat), want.to(at::kFloat)), bound);
  }
  for (int64_t r = 0; r < rows; r += 2) EXPECT_TRUE(out.select(1, r).isnan().all().item<bool>()) << "row " << r;
}

TEST(PagedDecodeAttention, MatchesSdpaOverGatheredKeysAtEverySimdLevel) {
  const std::vector<Case> cases = {
      {4, 2, 64, 16, {1, 5, 16, 17, 200}},  // grouped-query, block boundaries, one position
      {3, 3, 40, 8, {9, 64, 33}},           // no grouping, a head size with a vector tail
      {8, 1, 24, 64, {130, 2}},             // one key/value head for all
  };
  for (const ops::SimdLevel level : ops::supported_simd_levels()) {
    ScopedEnv simd("DS_SIMD", ops::simd_level_name(level));
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << ops::simd_level_name(level) << " " << dtype << " case " << i);
        check(cases[i], dtype);
      }
    }
  }
}

TEST(PagedDecodeAttention, RefusesMismatchedInputs) {
  const at::Tensor keys = at::zeros({2, 4, 2, 8}), q = at::zeros({4, 3, 8});
  at::Tensor out = at::zeros({4, 3, 8});
  const std::vector<int64_t> table = {0, 1};
  const std::vector<ops::PagedDecodeSequence> seqs = {{0, 3, table.data()}};
  EXPECT_THROW(ops::paged_decode_attention(q.to(at::kBFloat16), keys, keys, seqs, 1.0, out), std::exception);
  EXPECT_THROW(ops::paged_decode_attention(at::zeros({3, 3, 8}), keys, keys, seqs, 1.0, out), std::exception);
  EXPECT_THROW(ops::paged_decode_attention(q, keys, keys, {{5, 3, table.data()}}, 1.0, out), std::exception);
  EXPECT_THROW(ops::paged_decode_attention(q, keys, keys, {{0, 0, table.data()}}, 1.0, out), std::exception);
  EXPECT_FALSE(ops::paged_decode_attention_supports(at::zeros({1}, at::kDouble)));
  EXPECT_NO_THROW(ops::paged_decode_attention(q, keys, keys, seqs, 1.0, out));
}

}  // namespace
