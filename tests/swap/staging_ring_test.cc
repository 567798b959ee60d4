// swap/staging_ring.h: the host buffers an accelerator's swapped partitions pass through (offload_param nvme's
// buffer_count). Here on the CPU accelerator, whose events complete at once: the rotation, sizes, lazy allocation and
// refusals. The GPU check (scripts/gpu_check.sh) runs the copies it fences.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <set>

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
    ring.fence();
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
  ring.fence();
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

// The CPU accelerator has nothing to pin: pin_memory asks for nothing it cannot do.
TEST(StagingRing, PinningFollowsTheAccelerator) {
  StagingRing ring(2, 8, at::kFloat, /*pin=*/true);
  const bool can_pin = deepspeed::accelerator::get_accelerator().pin_memory_supported();
  EXPECT_EQ(ring.pinned(), can_pin);
  EXPECT_EQ(deepspeed::accelerator::get_accelerator().is_pinned(ring.acquire(8)), can_pin);
}

}  // namespace
