// Stage 3's gathered and in-flight bounds sized from the model (src/zero/stage3/working_set.h).
#include "zero/stage3/working_set.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using deepspeed::zero::size_working_set;
using deepspeed::zero::WorkingSet;

constexpr WorkingSet kDeepSpeedDefaults{1000000000, 500000000};

// The 25M GPT of bench/zero: eight blocks of 3,145,728 elements. DeepSpeed's defaults would keep all eight
// gathered and three blocks' gradients in flight; sized, two blocks gathered (the one in use and the next) and one
// block's gradients.
TEST(Stage3WorkingSet, DefaultsOnASmallModelAreCutToItsUnits) {
  const WorkingSet s = size_working_set(kDeepSpeedDefaults, 3145728, 8 * 3145728);
  EXPECT_EQ(s.max_live_elems, 2 * 3145728);
  EXPECT_EQ(s.reduce_bucket_elems, 3145728);
}

// A 7B model (32 layers of 202M elements, 6.5B in its units): the live bound is an eighth of it, near DeepSpeed's
// 1e9; the reduce bucket stays DeepSpeed's 5e8. From 8B on, both stay as DeepSpeed has them.
TEST(Stage3WorkingSet, DefaultsOnBillionParameterModelsStayNearDeepSpeeds) {
  const WorkingSet s = size_working_set(kDeepSpeedDefaults, 202383360, int64_t{32} * 202383360);
  EXPECT_EQ(s.max_live_elems, int64_t{32} * 202383360 / 8);
  EXPECT_EQ(s.reduce_bucket_elems, 500000000);
  const WorkingSet large = size_working_set(kDeepSpeedDefaults, 202383360, int64_t{40} * 202383360);
  EXPECT_EQ(large.max_live_elems, 1000000000);
  EXPECT_EQ(large.reduce_bucket_elems, 500000000);
}

// Many small units: an eighth of the model, not two units, so prefetch still reaches ahead.
TEST(Stage3WorkingSet, ManySmallUnitsKeepAnEighthOfTheModel) {
  const WorkingSet s = size_working_set(kDeepSpeedDefaults, 1000, 800000);
  EXPECT_EQ(s.max_live_elems, 100000);
  EXPECT_EQ(s.reduce_bucket_elems, 100000);
}

// A configured value below the sized bound is what the user asked for: kept.
TEST(Stage3WorkingSet, SmallerConfiguredValuesAreKept) {
  const WorkingSet s = size_working_set({5000, 7000}, 3145728, 8 * 3145728);
  EXPECT_EQ(s.max_live_elems, 5000);
  EXPECT_EQ(s.reduce_bucket_elems, 7000);
}

}  // namespace
