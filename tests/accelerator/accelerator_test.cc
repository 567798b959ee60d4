// The CPU accelerator contract. CTest runs each case in its own process (gtest_discover_tests), so each case sees a
// fresh process-wide accelerator and may set DS_ACCELERATOR before first use.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <string>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::accelerator {
namespace {

TEST(Accelerator, DetectsCpuWithoutCuda) {
  unsetenv("DS_ACCELERATOR");
  Accelerator& acc = get_accelerator();
  EXPECT_EQ(acc.name(), "cpu");
  EXPECT_EQ(acc.device_name(), "cpu");
  EXPECT_EQ(acc.device().type(), c10::kCPU);
  EXPECT_EQ(acc.device_count(), 1);
  EXPECT_EQ(acc.communication_backend_name(), "gloo");
  EXPECT_EQ(&acc, &get_accelerator()) << "one instance per process";
}

TEST(Accelerator, UnknownNameInEnvIsAnErrorNamingIt) {
  setenv("DS_ACCELERATOR", "tpu", 1);
  try {
    get_accelerator();
    FAIL() << "expected an error for DS_ACCELERATOR=tpu";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DS_ACCELERATOR=tpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("available: cpu"), std::string::npos) << e.what();
  }
  // A corrected environment works in the same process: a failed selection is not cached.
  setenv("DS_ACCELERATOR", "cpu", 1);
  EXPECT_EQ(get_accelerator().name(), "cpu");
}

TEST(Accelerator, CpuDeviceIndexOutOfRangeThrows) {
  EXPECT_THROW(get_accelerator().device(1), deepspeed::Error);
  EXPECT_THROW(get_accelerator().set_device(-1), deepspeed::Error);
  EXPECT_NO_THROW(get_accelerator().set_device(3));  // every local rank shares the one CPU device
}

TEST(Accelerator, MemoryStatsSeeAnAllocation) {
  Accelerator& acc = get_accelerator();
  MemoryStats before = acc.memory_stats();
  EXPECT_GT(before.total_bytes, 0);
  EXPECT_GT(before.available_bytes, 0);
  EXPECT_LE(before.available_bytes, before.total_bytes);
  at::Tensor big = at::ones({64 * 1024 * 1024 / 4}, at::kFloat);  // 64 MiB, touched by the fill
  MemoryStats after = acc.memory_stats();
  EXPECT_GE(after.allocated_bytes - before.allocated_bytes, 48LL * 1024 * 1024);
  EXPECT_GE(after.peak_allocated_bytes, after.allocated_bytes);
  EXPECT_EQ(big.sum().item<double>(), 64.0 * 1024 * 1024 / 4);
}

TEST(Accelerator, RngStateRoundTripsAndSeedIsDeterministic) {
  Accelerator& acc = get_accelerator();
  acc.manual_seed(1234);
  at::Tensor first = at::randn({16});
  acc.manual_seed(1234);
  EXPECT_TRUE(at::equal(first, at::randn({16})));

  at::Tensor state = acc.get_rng_state();
  at::Tensor a = at::randn({16});
  acc.set_rng_state(state);
  at::Tensor b = at::randn({16});
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::equal(a, first));
}

TEST(Accelerator, PinMemoryIsIdentityOnCpu) {
  Accelerator& acc = get_accelerator();
  at::Tensor t = at::zeros({8});
  EXPECT_FALSE(acc.pin_memory_supported());
  EXPECT_EQ(acc.pin_memory(t).data_ptr(), t.data_ptr());
  EXPECT_FALSE(acc.is_pinned(t));
}

TEST(Accelerator, ThreadsPerRankSplitsTheAffinityMask) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  int cores = CPU_COUNT(&set);
  EXPECT_EQ(host_threads_per_rank(1), cores);
  EXPECT_EQ(host_threads_per_rank(cores + 1), 1);
  EXPECT_EQ(host_threads_per_rank(2), cores / 2 < 1 ? 1 : cores / 2);
  EXPECT_THROW(host_threads_per_rank(0), deepspeed::Error);
}

}  // namespace
}  // namespace deepspeed::accelerator
