// The host block cache (src/accelerator/host_block_cache.h) as LibTorch's CPU allocator: freed large blocks are
// reused by the next request of their size class, the cache never lets live + cached pass the live peak by more
// than 1/32 nor its own limit, what it gives back leaves the process's resident memory (the kernel's VmRSS), and
// the environment's opt-outs and bad values are honoured or refused by name. ctest runs each test in a process of
// its own (gtest_discover_tests), so each installs the cache afresh.
#include "accelerator/host_block_cache.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "counting_allocator.h"

namespace {

using deepspeed::accelerator::host_block_cache_stats;
using deepspeed::accelerator::HostBlockCacheOptions;

constexpr int64_t kMiB = int64_t{1} << 20;

at::Tensor mib_tensor(int64_t mib) { return at::empty({mib * kMiB / 4}, at::kFloat); }

int64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

void install(int64_t limit_mib = 256) {
  HostBlockCacheOptions options;
  options.cache_limit_bytes = limit_mib * kMiB;
  ASSERT_TRUE(deepspeed::accelerator::install_host_block_cache(options));
}

TEST(HostBlockCache, AFreedBlockServesTheNextRequestOfItsClass) {
  install();
  void* first = nullptr;
  {
    at::Tensor t = mib_tensor(4);
    first = t.data_ptr();
    t.fill_(1.0f);
  }
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 4 * kMiB);
  at::Tensor again = at::empty({4 * kMiB / 4 - 100}, at::kFloat);  // a little smaller: the same class
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(host_block_cache_stats().hits, 1);
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 0);
  EXPECT_EQ(host_block_cache_stats().live_bytes, 4 * kMiB);
  // Below the threshold: LibTorch's own allocator, not counted here.
  at::Tensor small = at::empty({1024}, at::kFloat);
  EXPECT_EQ(host_block_cache_stats().live_bytes, 4 * kMiB);
  // Arithmetic on cached blocks is LibTorch's as ever.
  at::Tensor a = at::arange(1 << 20, at::kFloat), b = a * 2;
  EXPECT_TRUE(at::equal(b - a, a));
}

TEST(HostBlockCache, TheCacheNeverRaisesTheLivePeak) {
  install();
  {
    std::vector<at::Tensor> ten;
    for (int i = 0; i < 10; ++i) ten.push_back(mib_tensor(4));  // live peak 40 MiB
  }
  auto s = host_block_cache_stats();
  EXPECT_EQ(s.cached_bytes, 40 * kMiB);
  // Another class: taking 12 MiB fresh would put live + cached at 52 MiB, past the 40 MiB peak (+1/32): cached
  // blocks go back to the kernel first.
  at::Tensor big = mib_tensor(12);
  s = host_block_cache_stats();
  EXPECT_EQ(s.live_bytes, 12 * kMiB);
  EXPECT_LE(s.live_bytes + s.cached_bytes, 40 * kMiB + 40 * kMiB / 32);
  EXPECT_GE(s.cached_bytes, 24 * kMiB);  // only as many as needed went
}

TEST(HostBlockCache, ItsLimitAndWhatItGivesBackLeaveResidentMemory) {
  install(/*limit_mib=*/8);
  const int64_t before = rss_bytes();
  {
    at::Tensor t = mib_tensor(64);
    t.fill_(1.0f);  // touched: resident
    EXPECT_GE(rss_bytes() - before, 60 * kMiB);
  }
  // 64 MiB exceed the 8 MiB limit: unmapped at once, so the resident memory is back.
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 0);
  EXPECT_LT(rss_bytes() - before, 8 * kMiB);
  {
    std::vector<at::Tensor> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(mib_tensor(4).fill_(1.0f));
  }
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 8 * kMiB);
  deepspeed::accelerator::release_host_block_cache();
  EXPECT_EQ(host_block_cache_stats().cached_bytes, 0);
  EXPECT_LT(rss_bytes() - before, 8 * kMiB);
}

TEST(HostBlockCache, ThreadsAllocatingAndFreeingLeaveNothingLive) {
  install(/*limit_mib=*/16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) {
        at::Tensor x = at::empty({(1 + (i * 7 + t) % 9) * 65536}, at::kFloat);  // 256 KiB .. 2.25 MiB
        x.fill_(static_cast<float>(i));
        EXPECT_EQ(x[x.numel() - 1].item<float>(), static_cast<float>(i));
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto s = host_block_cache_stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_LE(s.cached_bytes, 16 * kMiB);
  EXPECT_GT(s.hits, 0);
}

TEST(HostBlockCache, RawBlocksOfEitherSizeGoBackToWhereTheyCameFrom) {
  install();
  c10::Allocator* cache = c10::GetCPUAllocator();
  for (size_t bytes : {size_t{100}, size_t{64} << 10, size_t{3} << 20}) {
    void* p = cache->raw_allocate(bytes);
    std::memset(p, 1, bytes);
    cache->raw_deallocate(p);
  }
  EXPECT_EQ(host_block_cache_stats().live_bytes, 0);
  // A counting allocator installed over the cache (as the memory tests do after an engine ran) delegates through
  // raw_allocate: small and large tensors come and go through both.
  CountingAllocator counting;
  {
    CountingAllocator::Scope scope(&counting);
    at::Tensor small = at::ones({16}), large = at::ones({1 << 20});
    EXPECT_EQ(counting.live(), 64 + (4 << 20));
  }
  EXPECT_EQ(counting.live(), 0);
  EXPECT_EQ(host_block_cache_stats().live_bytes, 0);
  EXPECT_EQ(c10::GetCPUAllocator(), cache);
}

TEST(HostBlockCache, AnApplicationsOwnAllocatorStays) {
  CountingAllocator counting;
  CountingAllocator::Scope scope(&counting);
  EXPECT_FALSE(deepspeed::accelerator::install_host_block_cache(HostBlockCacheOptions{}));
  EXPECT_EQ(c10::GetCPUAllocator(), &counting);
  EXPECT_FALSE(host_block_cache_stats().installed);
}

TEST(HostBlockCache, TheEnvironmentOptsOutOrIsRefusedByName) {
  using deepspeed::accelerator::host_block_cache_options_from_env;
  using deepspeed::accelerator::host_block_cache_wanted;
  EXPECT_TRUE(host_block_cache_wanted());
  setenv("MALLOC_MMAP_THRESHOLD_", "131072", 1);  // the user tunes glibc: theirs to manage
  EXPECT_FALSE(host_block_cache_wanted());
  setenv("DS_HOST_ALLOCATOR", "cache", 1);  // unless they ask for the cache by name
  EXPECT_TRUE(host_block_cache_wanted());
  unsetenv("MALLOC_MMAP_THRESHOLD_");
  setenv("DS_HOST_ALLOCATOR", "default", 1);
  EXPECT_FALSE(host_block_cache_wanted());
  setenv("DS_HOST_ALLOCATOR", "jemalloc", 1);
  try {
    host_block_cache_wanted();
    ADD_FAILURE() << "DS_HOST_ALLOCATOR=jemalloc accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("DS_HOST_ALLOCATOR must be 'cache' or 'default', got 'jemalloc'"),
              std::string::npos)
        << e.what();
  }
  unsetenv("DS_HOST_ALLOCATOR");
  setenv("DS_HOST_CACHE_MB", "32", 1);
  EXPECT_EQ(host_block_cache_options_from_env().cache_limit_bytes, 32 * kMiB);
  for (const char* bad : {"-1", "lots", "12MB"}) {
    setenv("DS_HOST_CACHE_MB", bad, 1);
    EXPECT_THROW(host_block_cache_options_from_env(), std::exception) << bad;
  }
  unsetenv("DS_HOST_CACHE_MB");
}

}  // namespace
