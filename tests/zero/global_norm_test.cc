// zero::squared_norm / global_norm against a double reference. The gradient norm sets the clipping coefficient
// and the logged grad_norm: summed in float32 over one flat buffer it drifts with the buffer's length (3e-5 to 1e-4
// relative at ~1M elements, measured), so it changed with the ZeRO layout instead of the model.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tolerance.h"
#include "zero/global_norm.h"

namespace {

// Summing n squares in double is within n * 2^-53 relative of the exact sum; the inputs are exact in double. For
// 10M elements that is 1.1e-9, and the square root halves it: far inside 1e-7 (the bar, 1000x below the
// float32 drift).
constexpr int64_t kElements = 10'000'000;
const double kBound = tolerance::reordered(1.0 / (int64_t{1} << 52), kElements, 1);

double reference_norm(const at::Tensor& t) {
  // ATen's double sum of the squares, computed from a double copy: independent of our chunking.
  return std::sqrt(t.to(at::kDouble).pow(2).sum().item<double>());
}

at::Tensor gradient_like(int64_t n) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  // Magnitudes over six decades, as real gradients have: the small ones are what float32 accumulation loses.
  return at::randn({n}, gen) * at::pow(10.0, at::rand({n}, gen) * 6 - 5);
}

TEST(GlobalNorm, TenMillionElementsMatchADoubleReference) {
  const at::Tensor g = gradient_like(kElements);
  const double want = reference_norm(g);
  ASSERT_GT(kBound, 0.0);
  EXPECT_WITHIN(std::abs(std::sqrt(deepspeed::zero::squared_norm(g)) - want) / want, 1e-7);
  EXPECT_WITHIN(std::abs(deepspeed::zero::global_norm({g}, nullptr) - want) / want, 1e-7);
  // The bound the double arithmetic itself guarantees is far tighter still.
  EXPECT_WITHIN(std::abs(deepspeed::zero::global_norm({g}, nullptr) - want) / want, kBound);
}

TEST(GlobalNorm, SplitBuffersViewsAndLowPrecisionGiveTheSameNorm) {
  const at::Tensor g = gradient_like(300'001);
  const double whole = deepspeed::zero::global_norm({g}, nullptr);
  // Partitions of uneven sizes (as ZeRO holds them) and a strided view: the same elements, the same norm.
  const double parts = deepspeed::zero::global_norm({g.narrow(0, 0, 70'000), g.narrow(0, 70'000, 230'001)}, nullptr);
  EXPECT_WITHIN(std::abs(parts - whole) / whole, kBound);
  const at::Tensor matrix = g.narrow(0, 0, 300'000).view({600, 500});
  const double strided = deepspeed::zero::global_norm({matrix.t()}, nullptr);
  EXPECT_WITHIN(std::abs(strided - reference_norm(matrix)) / reference_norm(matrix), kBound);
  // bf16 gradients: the norm of exactly the bf16 values.
  const at::Tensor b = g.to(at::kBFloat16);
  EXPECT_WITHIN(std::abs(deepspeed::zero::global_norm({b}, nullptr) - reference_norm(b)) / reference_norm(b), kBound);
  EXPECT_EQ(deepspeed::zero::squared_norm(at::empty({0})), 0.0);
}

}  // namespace
