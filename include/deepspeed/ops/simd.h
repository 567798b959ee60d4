// Which SIMD variant of the fused CPU optimizer kernels runs, and a report of them for `ds_report`.
//
// Every kernel is compiled three times: a portable C++ variant ("scalar": no ISA extension beyond
// the platform baseline), one for AVX2 and one for AVX-512F. The best variant the CPU supports is
// chosen at run time; the environment variable DS_SIMD=scalar|avx2|avx512 forces one (for tests and
// for comparing), and a caller may also pass a level explicitly to each step function. All variants
// perform the same IEEE operations in the same order per element (no FMA contraction), so they give
// bit-identical results: a run resumed on another CPU continues on the same trajectory.
//
// Thread-safety: all functions are thread-safe; DS_SIMD is read on every call that resolves kAuto.
#pragma once

#include <string>
#include <vector>

namespace deepspeed::ops {

enum class SimdLevel {
  kAuto,    // DS_SIMD if set, else the best level this CPU supports
  kScalar,  // portable C++
  kAvx2,    // x86-64 AVX2
  kAvx512,  // x86-64 AVX-512F
};

// "auto", "scalar", "avx2" or "avx512".
const char* simd_level_name(SimdLevel level);

// The inverse of simd_level_name; throws deepspeed::Error naming `what` and the accepted values.
SimdLevel parse_simd_level(const std::string& name, const std::string& what = "SIMD level");

// Whether this build has kernels for `level` and this CPU (and OS) can run them. kAuto is always
// supported.
bool simd_level_supported(SimdLevel level);

// The concrete levels this CPU can run, best first (always ends with kScalar).
std::vector<SimdLevel> supported_simd_levels();

// The level a step call will use: `requested` when concrete, else DS_SIMD when set, else the best
// supported. Throws deepspeed::Error when the level is unknown or this CPU lacks it.
SimdLevel resolve_simd_level(SimdLevel requested = SimdLevel::kAuto);

// One line per kernel, e.g. "cpu_adam ....... avx512 (avx2, scalar available)": the variant this
// CPU gets and the others it could run. Never throws; a bad DS_SIMD is reported in the lines
// instead.
std::vector<std::string> kernel_report();

}  // namespace deepspeed::ops
