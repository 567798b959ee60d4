// swap/staging_ring.h: the host buffers an accelerator's swapped partitions pass through (offload_param nvme's
// buffer_count): the rotation, sizes, lazy allocation, refusals, pinning; and, on a GPU (the gpu-labelled run), that a
// buffer handed out again is not overwritten under a copy still reading it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <set>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "swap/staging_ring.h"

namespace {

using deepspeed::swap::StagingRing;

// Each transfer takes the next of `count` buffers in turn, so the data of the last count-1 transfers is still intact
// when the next one is staged (what lets a copy run while the next read lands).
TEST(StagingRing, TransfersRotateThroughCountBuffers) {
  StagingRing ring(3, 100, at::kBFloat16, /*pin=*/false);
  EXPECT_EQ(ring.allocated_bytes(), 0) << "nothing is allocated before the first transfer";
  std::vector<const void*> seen;
  for (int i = 0; i < 7; ++i) {
    at::Tensor b = ring.acquire(10 + i);
    EXPECT_EQ(b.numel(), 10 + i);
    EXPECT_EQ(b.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(b.device().is_cpu());
    b.fill_(static_cast<double>(i));
    ring.fence(at::Device(at::kCPU));
    seen.push_back(b.data_ptr());
  }
  EXPECT_EQ(std::set<const void*>(seen.begin(), seen.end()).size(), 3u);
  for (int i = 3; i < 7; ++i) EXPECT_EQ(seen[i], seen[i - 3]) << "transfer " << i;
  EXPECT_EQ(ring.allocated_bytes(), 3 * 100 * 2);
  // The two transfers before the latest still hold their data.
  at::Tensor latest = ring.acquire(1);
  EXPECT_EQ(latest.data_ptr(), seen[4]);
  EXPECT_EQ(ring.acquire(1).item<double>(), 5.0);
  EXPECT_EQ(ring.acquire(1).item<double>(), 6.0);
}

TEST(StagingRing, OneBufferServesEveryTransfer) {
  StagingRing ring(1, 8, at::kFloat, false);
  const void* first = ring.acquire(8).data_ptr();
  ring.fence(at::Device(at::kCPU));
  EXPECT_EQ(ring.acquire(4).data_ptr(), first);
  EXPECT_EQ(ring.count(), 1);
}

TEST(StagingRing, BadSizesAreRefused) {
  try {
    StagingRing ring(0, 8, at::kFloat, false);
    ADD_FAILURE() << "buffer_count 0 must be refused";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_optimization.offload_param.buffer_count"), std::string::npos)
        << e.what();
  }
  StagingRing ring(2, 8, at::kFloat, false);
  EXPECT_THROW(ring.acquire(9), deepspeed::Error);
}

// A copy up from the ring's buffer runs without waiting (pinned); the next acquire of that buffer waits for it, so
// overwriting the buffer then cannot reach the device's copy. On the CPU accelerator the copies are synchronous and
// this holds trivially; on a GPU it is the fence at work.
TEST(StagingRing, ABufferIsReusedOnlyAfterItsCopyCompleted) {
  auto& acc = deepspeed::accelerator::get_accelerator();
  const c10::Device device = acc.device();
  for (int count : {1, 2}) {
    StagingRing ring(count, 1 << 20, at::kFloat, /*pin=*/true);
    std::vector<at::Tensor> on_device;
    for (int i = 0; i < 4; ++i) {
      at::Tensor staged = ring.acquire(1 << 20);
      staged.fill_(static_cast<double>(i));
      at::Tensor dst = at::empty({1 << 20}, at::TensorOptions().dtype(at::kFloat).device(device));
      dst.copy_(staged, /*non_blocking=*/ring.pinned());
      ring.fence(device);
      on_device.push_back(dst);
    }
    acc.synchronize();
    for (int i = 0; i < 4; ++i)
      EXPECT_TRUE(at::all(on_device[i].cpu().eq(static_cast<double>(i))).item<bool>()) << count << " " << i;
  }
}

// The CPU accelerator has nothing to pin: pin_memory asks for nothing it cannot do.
TEST(StagingRing, PinningFollowsTheAccelerator) {
  StagingRing ring(2, 8, at::kFloat, /*pin=*/true);
  const bool can_pin = deepspeed::accelerator::get_accelerator().pin_memory_supported();
  EXPECT_EQ(ring.pinned(), can_pin);
  EXPECT_EQ(deepspeed::accelerator::get_accelerator().is_pinned(ring.acquire(8)), can_pin);
}

}  // namespace
