// Decode attention over a blocked KV cache, read in place: FastGen's decode step on a CPU.
//
// Each decoding sequence has one new query per head and attends to its own cached positions 0..length-1, which lie
// in the blocks its table names. LibTorch has no attention over such a cache, so the portable way is to gather every
// sequence's keys and values into one padded batch and call scaled_dot_product_attention (what a GPU still does
// here): on a CPU that copy, made anew for every layer of every pass, cost as much as the attention itself, and more
// with each sequence added. This kernel reads the keys and values where they lie: softmax(q k^T * scale) v per query
// head, the key/value head shared by heads / kv_heads query heads as scaled_dot_product_attention's enable_gqa does.
// Compiled per SIMD level (deepspeed/ops/simd.h: DS_SIMD chooses, as for the optimizers).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace deepspeed::ops {

struct PagedDecodeSequence {
  int64_t row = 0;     // its query's row among the pass's tokens
  int64_t length = 0;  // the positions it attends to, 0..length-1 (>= 1)
  // Its block table: position p is at slot blocks[p / block_size] * block_size + p % block_size.
  const int64_t* blocks = nullptr;
};

// q [heads, T, head_dim] (head_dim contiguous), keys and values [num_blocks, block_size, kv_heads, head_dim]
// contiguous, all float or all bfloat16 on the CPU, head_dim at most 512; out like q: row s.row of every head written
// for each sequence, the other rows left alone. Accumulates in float. The caller guarantees the block tables are in
// range (the model's plan checks them).
void paged_decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const std::vector<PagedDecodeSequence>& sequences, double scale, at::Tensor& out);

// Whether paged_decode_attention takes a cache of this dtype, device and head size.
bool paged_decode_attention_supports(const at::Tensor& keys);

}  // namespace deepspeed::ops
