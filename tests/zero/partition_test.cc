// PartitionLayout: padding to equal aligned partitions and splitting bucket ranges by owner.
#include "zero/partition.h"

#include <gtest/gtest.h>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

TEST(PartitionLayout, PadsToEqualAlignedPartitions) {
  PartitionLayout one(100, 1, 0);
  EXPECT_EQ(one.padded_numel(), 112);  // next multiple of 16
  PartitionLayout three(100, 3, 2);
  EXPECT_EQ(three.partition_size(), 48);  // 100 -> 144 = 3 x 48, 48 a multiple of 16
  EXPECT_EQ(three.padded_numel(), 144);
  EXPECT_EQ(three.begin(2), 96);
  EXPECT_EQ(three.end(2), 144);
  EXPECT_EQ(three.owner_of(47), 0);
  EXPECT_EQ(three.owner_of(48), 1);
  EXPECT_EQ(PartitionLayout::padded_size(64, 4), 64);
  EXPECT_EQ(PartitionLayout::padded_size(65, 4), 128);
}

TEST(PartitionLayout, SplitsRangesByOwner) {
  PartitionLayout l(128, 4, 0);  // partitions of 32
  auto segs = l.owner_segments(20, 100);
  ASSERT_EQ(segs.size(), 4u);
  EXPECT_EQ(segs[0].owner, 0);
  EXPECT_EQ(segs[0].begin, 20);
  EXPECT_EQ(segs[0].end, 32);
  EXPECT_EQ(segs[1].owner, 1);
  EXPECT_EQ(segs[1].end, 64);
  EXPECT_EQ(segs[3].owner, 3);
  EXPECT_EQ(segs[3].begin, 96);
  EXPECT_EQ(segs[3].end, 100);
  EXPECT_TRUE(l.owner_segments(40, 40).empty());
  auto inside = l.owner_segments(33, 40);
  ASSERT_EQ(inside.size(), 1u);
  EXPECT_EQ(inside[0].owner, 1);
}

TEST(PartitionLayout, RejectsBadWorlds) {
  EXPECT_THROW(PartitionLayout(10, 0, 0), deepspeed::Error);
  EXPECT_THROW(PartitionLayout(10, 2, 2), deepspeed::Error);
}

}  // namespace
}  // namespace deepspeed::zero
