// The inf/NaN locator the stages use to name the parameter whose gradient overflowed.
#include "zero/nonfinite.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

TEST(FirstNonfinite, FindsTheFirstBadElementInEveryFloatType) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<at::ScalarType> types = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  for (at::ScalarType type : types) {
    SCOPED_TRACE(c10::toString(type));
    at::Tensor g = at::randn({3 * 4096 + 17}, at::kFloat);
    EXPECT_EQ(first_nonfinite(g.to(type)), -1);
    g[9000] = nan;
    g[12000] = inf;
    EXPECT_EQ(first_nonfinite(g.to(type)), 9000);
    g[5000] = -inf;
    EXPECT_EQ(first_nonfinite(g.to(type)), 5000);
    g[0] = inf;
    EXPECT_EQ(first_nonfinite(g.to(type)), 0);
  }
}

TEST(FirstNonfinite, LargestFiniteValuesAreFinite) {
  EXPECT_EQ(first_nonfinite(at::full({10}, 65504.0, at::kHalf)), -1);
  EXPECT_EQ(first_nonfinite(at::full({10}, std::numeric_limits<float>::max(), at::kFloat)), -1);
  EXPECT_EQ(first_nonfinite(at::full({10}, -std::numeric_limits<double>::max(), at::kDouble)), -1);
  // An fp32 value past fp16's range becomes inf when the gradient is cast down: that is an
  // overflow.
  EXPECT_EQ(first_nonfinite(at::full({10}, 70000.0, at::kFloat).to(at::kHalf)), 0);
}

TEST(FirstNonfinite, StridedEmptyAndIntegerTensors) {
  at::Tensor m = at::zeros({4, 6}, at::kFloat);
  m[1][3] = std::numeric_limits<float>::infinity();  // flat index 9 here, 3 * 4 + 1 = 13 transposed
  EXPECT_EQ(first_nonfinite(m), 9);
  EXPECT_FALSE(m.t().is_contiguous());
  EXPECT_EQ(first_nonfinite(m.t()), 13);
  EXPECT_EQ(first_nonfinite(at::zeros({0}, at::kFloat)), -1);
  EXPECT_EQ(first_nonfinite(at::ones({5}, at::kLong)), -1);
  EXPECT_THROW(first_nonfinite(at::Tensor()), Error);
}

}  // namespace
}  // namespace deepspeed::zero
