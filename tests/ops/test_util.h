// Helpers shared by the ops tests: per-SIMD-level suite naming, tolerant comparison, env guard.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "deepspeed/ops/simd.h"
#include "scoped_env.h"

namespace deepspeed::ops {
// So CTest names read "... GetParam() = avx2" instead of a byte dump.
inline void PrintTo(SimdLevel level, std::ostream* os) { *os << simd_level_name(level); }
}  // namespace deepspeed::ops

namespace deepspeed::ops::testing {

// Largest |a - ref| / max(1, |ref|): absolute near zero, relative for large values. Computed in
// ref's dtype: for nearby floats a - ref is exact, so float is precise enough and avoids 8-byte
// temporaries.
inline double max_scaled_diff(const at::Tensor& a, const at::Tensor& ref) {
  if (a.numel() == 0) return 0.0;
  return ((a.to(ref.scalar_type()) - ref).abs() / ref.abs().clamp_min(1.0)).max().item<double>();
}

// The sizes a per-level suite runs: odd lengths and a tile boundary for every level, and one large
// multi-tile length for the best level only (CpuOptimizerTest.AllSimdLevelsAreBitIdentical shows
// the other levels agree with it bit for bit on multi-tile lengths, so repeating it would only cost
// time).
inline std::vector<int64_t> sizes_for(SimdLevel level, int64_t tile) {
  std::vector<int64_t> sizes = {1, 7, 33, tile + 3};
  if (level == supported_simd_levels().front()) sizes.push_back(1000003);
  return sizes;
}

inline std::string level_param_name(const ::testing::TestParamInfo<SimdLevel>& info) {
  return simd_level_name(info.param);
}

using ::ScopedEnv;  // tests/common/scoped_env.h

}  // namespace deepspeed::ops::testing
