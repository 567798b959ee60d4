// Stage 3's buffer pool (zero/stage3/buffer_pool.h): buffers are reused by (dtype, numel), and free ones are kept
// only within the cache limit, so a burst of buffers in use at once does not stay resident after it.
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
