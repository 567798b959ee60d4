// Stage 3's buffer pool (zero/stage3/buffer_pool.h): buffers are reused by dtype and size (a request may take a
// somewhat larger free buffer), and free ones are kept only within the most the pool ever had in use and the cache
// limit, so a burst of buffers in use at once does not stay resident after it, nor idle at the next peak.
#include "zero/stage3/buffer_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace dz = deepspeed::zero;

TEST(BufferPool, ReusesAReleasedBufferOfTheSameShape) {
  dz::BufferPool pool;
  at::Tensor a = pool.acquire(at::kFloat, 1000);
  const void* where = a.data_ptr();
  pool.release(std::move(a));
  at::Tensor b = pool.acquire(at::kFloat, 1000);
  EXPECT_EQ(b.data_ptr(), where);
  EXPECT_EQ(pool.allocations(), 1);
  pool.acquire(at::kBFloat16, 1000);  // another dtype: a new buffer
  EXPECT_EQ(pool.allocations(), 2);
}

// Five 4 KB buffers in use at once under a 12 KB limit: releasing them keeps what fits (in use + free <= limit),
// frees the rest, and the pool's reserved bytes say so. Without the limit all five would stay.
TEST(BufferPool, KeepsFreeBuffersOnlyWithinTheCacheLimit) {
  dz::BufferPool pool;
  pool.set_cache_limit(12 * 1024);
  std::vector<at::Tensor> burst;
  for (int i = 0; i < 5; ++i) burst.push_back(pool.acquire(at::kFloat, 1024));
  EXPECT_EQ(pool.bytes_reserved(), 5 * 4096);
  for (auto& t : burst) pool.release(std::move(t));
  EXPECT_EQ(pool.bytes_in_use(), 0);
  EXPECT_EQ(pool.bytes_reserved(), 3 * 4096);
  // The kept ones are reused; the fourth is a fresh allocation again.
  std::vector<at::Tensor> again;
  for (int i = 0; i < 4; ++i) again.push_back(pool.acquire(at::kFloat, 1024));
  EXPECT_EQ(pool.allocations(), 6);

  dz::BufferPool unlimited;
  std::vector<at::Tensor> kept;
  for (int i = 0; i < 5; ++i) kept.push_back(unlimited.acquire(at::kFloat, 1024));
  for (auto& t : kept) unlimited.release(std::move(t));
  EXPECT_EQ(unlimited.bytes_reserved(), 5 * 4096);
}

// A unit slightly smaller than a block (an embedding beside transformer blocks) reuses a free block buffer: the
// front of it, with the whole allocation counted in use and handed back whole. One more than twice the size is not
// taken: it would idle most of its bytes.
TEST(BufferPool, ARequestTakesTheSmallestFreeBufferUpToTwiceItsSize) {
  dz::BufferPool pool;
  at::Tensor block = pool.acquire(at::kFloat, 1000);
  const void* where = block.data_ptr();
  pool.release(std::move(block));
  at::Tensor embedding = pool.acquire(at::kFloat, 900);
  EXPECT_EQ(embedding.data_ptr(), where);
  EXPECT_EQ(embedding.numel(), 900);
  EXPECT_EQ(pool.bytes_in_use(), 4000);
  EXPECT_EQ(pool.allocations(), 1);
  pool.release(std::move(embedding));
  EXPECT_EQ(pool.bytes_in_use(), 0);
  at::Tensor again = pool.acquire(at::kFloat, 1000);  // the whole buffer is back under its own size
  EXPECT_EQ(again.data_ptr(), where);
  EXPECT_EQ(pool.allocations(), 1);
  pool.release(std::move(again));
  at::Tensor small = pool.acquire(at::kFloat, 499);  // a buffer of its own (the idle one is freed to make room)
  EXPECT_EQ(small.storage().nbytes(), 499u * 4);
  EXPECT_EQ(pool.allocations(), 2);
  EXPECT_EQ(pool.bytes_reserved(), 499 * 4);
}

// Free buffers never make the pool hold more than it has ever had in use at once: a request no free buffer can
// serve frees the idle ones first when keeping them would take the pool past that, so at the schedule's own peak
// nothing sits idle beside what is in use. Without the rule the pool would end holding 4 + 12 + 8 KB.
TEST(BufferPool, IdleBuffersDoNotOutgrowTheMostEverInUse) {
  dz::BufferPool pool;
  pool.release(pool.acquire(at::kFloat, 1000));
  EXPECT_EQ(pool.bytes_reserved(), 4000);
  at::Tensor big = pool.acquire(at::kFloat, 3000);  // the idle 4 KB buffer is freed: 12 KB is the new peak
  EXPECT_EQ(pool.bytes_reserved(), 12000);
  pool.release(std::move(big));
  EXPECT_EQ(pool.bytes_reserved(), 12000);  // within the 12 KB once in use: kept
  // Two 4 KB buffers (the 12 KB one is more than twice their size): the idle 12 KB goes before the first is made.
  at::Tensor a = pool.acquire(at::kFloat, 1000);
  at::Tensor b = pool.acquire(at::kFloat, 1000);
  EXPECT_EQ(pool.bytes_reserved(), 8000);
  EXPECT_EQ(pool.allocations(), 4);
  pool.release(std::move(a));
  pool.release(std::move(b));
  EXPECT_EQ(pool.bytes_reserved(), 8000);
}

// free_idle() drops every free buffer and nothing in use: the next request allocates anew.
TEST(BufferPool, FreeIdleDropsOnlyFreeBuffers) {
  dz::BufferPool pool;
  at::Tensor kept = pool.acquire(at::kFloat, 1000);
  pool.release(pool.acquire(at::kFloat, 2000));
  EXPECT_EQ(pool.bytes_reserved(), 12000);
  pool.free_idle();
  EXPECT_EQ(pool.bytes_reserved(), 4000);
  EXPECT_EQ(pool.bytes_in_use(), 4000);
  pool.release(pool.acquire(at::kFloat, 2000));
  EXPECT_EQ(pool.allocations(), 3);
}
