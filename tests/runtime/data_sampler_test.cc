// DataParallelSampler: the global batch of a step is the same whatever the layout, ranks never overlap, and
// the order is deterministic in (seed, epoch).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "deepspeed/data.h"
#include "deepspeed/error.h"

namespace deepspeed {
namespace {

std::vector<int64_t> union_of_ranks(int64_t n, int64_t micro, int64_t gas, int world, uint64_t seed, int64_t step) {
  std::vector<int64_t> all;
  for (int r = 0; r < world; ++r) {
    DataParallelSampler s(n, micro, gas, r, world, seed);
    for (int64_t m = 0; m < gas; ++m) {
      auto mb = s.micro_batch(step, m);
      EXPECT_EQ(static_cast<int64_t>(mb.size()), micro);
      all.insert(all.end(), mb.begin(), mb.end());
    }
  }
  return all;
}

TEST(DataParallelSampler, GlobalBatchIsIndependentOfLayout) {
  const int64_t n = 100;
  for (int64_t step : {0, 3, 11, 12, 25}) {  // 12 steps per epoch of batch 8: crosses epochs too
    auto single = union_of_ranks(n, 8, 1, 1, 42, step);
    auto two = union_of_ranks(n, 4, 1, 2, 42, step);
    auto four_gas = union_of_ranks(n, 1, 2, 4, 42, step);
    auto gas4 = union_of_ranks(n, 2, 4, 1, 42, step);
    EXPECT_EQ(single, two) << "step " << step;  // same positions in the same order
    EXPECT_EQ(single, four_gas) << "step " << step;
    EXPECT_EQ(single, gas4) << "step " << step;
    DataParallelSampler ref(n, 8, 1, 0, 1, 42);
    EXPECT_EQ(single, ref.global_batch(step));
  }
}

TEST(DataParallelSampler, EpochIsAPermutationAndDependsOnSeedAndEpoch) {
  DataParallelSampler s(64, 4, 1, 0, 1, 7);
  std::vector<int64_t> epoch0;
  for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
    auto b = s.global_batch(step);
    epoch0.insert(epoch0.end(), b.begin(), b.end());
  }
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(sorted[i], i);

  auto epoch1_first = s.global_batch(s.steps_per_epoch());
  EXPECT_NE(std::vector<int64_t>(epoch0.begin(), epoch0.begin() + 4), epoch1_first);
  DataParallelSampler other_seed(64, 4, 1, 0, 1, 8);
  EXPECT_NE(other_seed.global_batch(0), s.global_batch(0));
  DataParallelSampler same_seed(64, 4, 1, 0, 1, 7);
  EXPECT_EQ(same_seed.global_batch(0), s.global_batch(0));
}

TEST(DataParallelSampler, NoShuffleIsSequential) {
  DataParallelSampler s(10, 2, 1, 1, 2, 0, /*shuffle=*/false);
  EXPECT_EQ(s.micro_batch(0, 0), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s.micro_batch(1, 0), (std::vector<int64_t>{6, 7}));
}

TEST(DataParallelSampler, RejectsBadSizes) {
  EXPECT_THROW(DataParallelSampler(7, 4, 1, 0, 2, 0), deepspeed::Error);  // fewer samples than a global batch
  EXPECT_THROW(DataParallelSampler(100, 0, 1, 0, 1, 0), deepspeed::Error);
  EXPECT_THROW(DataParallelSampler(100, 2, 1, 2, 2, 0), deepspeed::Error);  // rank outside world
  DataParallelSampler s(100, 2, 2, 0, 1, 0);
  EXPECT_THROW(s.micro_batch(0, 2), deepspeed::Error);
  EXPECT_THROW(s.micro_batch(-1, 0), deepspeed::Error);
}

}  // namespace
}  // namespace deepspeed
