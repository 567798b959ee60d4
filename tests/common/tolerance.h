// Where every numeric bound of the test suite comes from. A comparison states its bound through one of these
// functions, so a reader sees the arithmetic behind it and no bound is a number tuned on one machine:
//
//  - exact():      the two sides do the same operations in the same order; any difference is a bug.
//  - reordered():  the same sums taken in another order (ranks, buckets, micro-batches, SIMD width). Each float
//                  sum of n terms is within (n - 1) * u of the exact one (u = epsilon / 2, Higham 2002, eq. 4.4),
//                  so two orders differ by at most n * epsilon relative per sum; over `steps` optimizer steps of a
//                  non-adaptive update (SGD) those differences add up.
//  - measured():   no closed form holds (Adam's first steps turn a rounding difference in a near-zero gradient
//                  into a full-size update of either sign, so a relative error depends on the data, not on epsilon
//                  alone). The worst error measured on both SIMD levels a machine of this kind may have, times a
//                  margin. How to re-measure: run the test with DS_TEST_PRINT_ERRORS=1 once at the machine's best
//                  level and once with DS_SIMD=avx2 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2.
//
// EXPECT_WITHIN(error, bound) checks error <= bound and, with DS_TEST_PRINT_ERRORS=1, prints both either way.
//
// A bound from here still has to separate the bugs a test is for: each test says which (a gradient summed
// instead of averaged over ranks is off by a factor of the world size; a wrong loss scale by orders of magnitude).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tolerance {

// Machine epsilon (the gap between 1 and the next representable value) of each training dtype.
constexpr double kFp32Epsilon = 1.0 / (1 << 23);  // 1.19e-7
constexpr double kBf16Epsilon = 1.0 / (1 << 7);   // 7.8e-3
constexpr double kFp16Epsilon = 1.0 / (1 << 10);  // 9.8e-4
constexpr double kFp64Epsilon = 1.0 / (int64_t{1} << 52);  // 2.2e-16: closed-form values computed in double

// The two sides must agree exactly (compare with at::equal where tensors are at hand).
constexpr double exact() { return 0.0; }

// Relative error bound of a result whose sums of up to `accumulations` terms were taken in another order than the
// reference's, carried through `steps` optimizer steps of a non-adaptive update.
constexpr double reordered(double epsilon, int64_t accumulations, int64_t steps) {
  return epsilon * static_cast<double>(accumulations) * static_cast<double>(steps);
}

// The worst error measured at AVX2 and at AVX-512 (see the header's comment), times `margin`.
constexpr double measured(double worst_avx2, double worst_avx512, double margin = 4.0) {
  return margin * (worst_avx2 > worst_avx512 ? worst_avx2 : worst_avx512);
}

// The largest elementwise difference relative to the largest magnitude of `want`: the measure for sums, whose
// error bound (n * epsilon * sum of |terms|) scales with the terms, not with each (possibly cancelled) result.
inline double relative_max_error(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

inline bool print_errors() {
  const char* v = std::getenv("DS_TEST_PRINT_ERRORS");
  return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
}

inline ::testing::AssertionResult within(const char* error_expr, const char* bound_expr, double error,
                                         double bound) {
  if (print_errors()) {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    std::fprintf(stderr, "tolerance: %s.%s %s = %.3e, bound %s = %.3e\n", t ? t->test_suite_name() : "?",
                 t ? t->name() : "?", error_expr, error, bound_expr, bound);
  }
  if (error <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << error_expr << " = " << error << " exceeds its bound " << bound_expr
                                       << " = " << bound;
}

}  // namespace tolerance

#define EXPECT_WITHIN(error, bound) EXPECT_PRED_FORMAT2(::tolerance::within, error, bound)
#define ASSERT_WITHIN(error, bound) ASSERT_PRED_FORMAT2(::tolerance::within, error, bound)
