// The CPU accelerator contract. CTest runs each case in its own process (gtest_discover_tests), so each case sees a
// fresh process-wide accelerator and may set DS_ACCELERATOR before first use.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::accelerator {
namespace {

TEST(Accelerator, DetectsCpuWithoutCuda) {
  unsetenv("DS_ACCELERATOR");
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // no device visible, even on a GPU machine (read when CUDA starts)
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

TEST(Accelerator, CudaAskedForWithoutADeviceIsAnError) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  setenv("DS_ACCELERATOR", "cuda", 1);
  try {
    get_accelerator();
    FAIL() << "expected an error for DS_ACCELERATOR=cuda with no device visible";
  } catch (const deepspeed::Error& e) {
    const std::string msg = e.what();
    const bool cuda_build = available_accelerators().find("cuda") != std::string::npos;
    EXPECT_NE(msg.find(cuda_build ? "no CUDA device is visible" : "not available in this build"), std::string::npos)
        << msg;
  }
}

TEST(Accelerator, LocalRanksBindTheirOwnDeviceOrShareWhenAsked) {
  EXPECT_EQ(device_for_local_rank(0, 8, false), 0);
  EXPECT_EQ(device_for_local_rank(7, 8, false), 7);
  EXPECT_EQ(device_for_local_rank(3, 2, true), 1);  // round-robin only when sharing is asked for
  try {
    device_for_local_rank(1, 1, false);
    FAIL() << "a second rank on one device must be refused unless shared";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("LOCAL_RANK 1 has no device of its own: 1 visible"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("DS_SHARE_DEVICES=1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(device_for_local_rank(-1, 2, true), deepspeed::Error);
  EXPECT_THROW(device_for_local_rank(0, 0, true), deepspeed::Error);
}

TEST(Accelerator, CpuRanksShareTheHostAndABadShareSettingIsNamed) {
  unsetenv("DS_SHARE_DEVICES");
  EXPECT_NO_THROW(bind_local_device(5));  // ranks on one host all use the CPU
  setenv("DS_SHARE_DEVICES", "yes", 1);
  try {
    bind_local_device(0);
    FAIL() << "DS_SHARE_DEVICES=yes must be refused";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DS_SHARE_DEVICES must be 0 or 1, got 'yes'"), std::string::npos) << e.what();
  }
  unsetenv("DS_SHARE_DEVICES");
}

TEST(Accelerator, CpuStreamsAreFinishedAndEventsTimeTheHostClock) {
  Accelerator& acc = get_accelerator();
  auto side = acc.new_stream();
  auto current = acc.current_stream();
  EXPECT_EQ(side->native().device(), acc.device());
  EXPECT_TRUE(side->query());
  {
    StreamGuard on_side(*side);
    at::Tensor t = at::ones({4}) * 2;  // work "issued" to the side stream runs at once on CPU
    EXPECT_EQ(t.sum().item<float>(), 8.0f);
  }
  current->wait_stream(*side);
  side->synchronize();

  auto start = acc.new_event(/*enable_timing=*/true);
  auto end = acc.new_event(/*enable_timing=*/true);
  EXPECT_FALSE(start->query()) << "not recorded yet";
  EXPECT_THROW(start->elapsed_ms(*end), deepspeed::Error);  // neither recorded
  start->record();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  end->record(side.get());
  EXPECT_TRUE(end->query());
  const double ms = start->elapsed_ms(*end);
  EXPECT_GE(ms, 29.0);
  EXPECT_LT(ms, 30000.0);

  auto fence = acc.new_event();  // no timing: a fence only
  fence->record();
  fence->synchronize();
  current->wait_event(*fence);
  try {
    fence->elapsed_ms(*end);
    FAIL() << "elapsed_ms on an event without timing must be refused";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("enable_timing"), std::string::npos) << e.what();
  }
  EXPECT_GT(acc.memory_allocated(), 0);  // this process's resident memory on CPU
  EXPECT_GE(acc.max_memory_allocated(), acc.memory_allocated());
  at::Tensor x = at::zeros({8});
  EXPECT_NO_THROW(acc.record_stream(x, *side));
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
