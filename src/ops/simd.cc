// SIMD-level detection, DS_SIMD parsing and the kernel report (see deepspeed/ops/simd.h).
#include "deepspeed/ops/simd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "ops/convert_kernels.h"
#include "ops/optimizer_kernels.h"

namespace deepspeed::ops {
namespace {

constexpr const char* kSimdEnv = "DS_SIMD";

// Best first, so the first supported one is the default.
constexpr SimdLevel kConcreteLevels[] = {SimdLevel::kAvx512, SimdLevel::kAvx2, SimdLevel::kScalar};

// The kernels ds_report lists; every one of them exists for every level this build compiles. The
// copy-back converters run inside any of the optimizer kernels when a caller passes param_copy.
constexpr const char* kKernelNames[] = {"cpu_adam", "cpu_sgd", "cpu_adagrad", "cpu_lion"};
constexpr const char* kCopyBf16Name = "cpu_copy_bf16";
constexpr const char* kCopyFp16Name = "cpu_copy_fp16";
constexpr size_t kReportColumn = 16;

bool cpu_has(SimdLevel level) {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's cpu model also checks that the OS saves the wider registers (XCR0), not only CPUID.
  // The explicit init makes this safe from static initializers (tests instantiate per-level suites
  // there).
  __builtin_cpu_init();
  switch (level) {
    case SimdLevel::kAvx2:
      // The AVX2 variant converts fp16 with F16C, which every AVX2 CPU has; check it all the same.
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case SimdLevel::kAvx512:
      return __builtin_cpu_supports("avx512f");
    default:
      return true;
  }
#else
  return level == SimdLevel::kScalar;
#endif
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAuto:
      return "auto";
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

SimdLevel parse_simd_level(const std::string& name, const std::string& what) {
  for (SimdLevel level :
       {SimdLevel::kAuto, SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (name == simd_level_name(level)) return level;
  }
  throw Error(::deepspeed::detail::str_cat(what, ": unknown SIMD level '", name,
                                           "' (expected one of: auto, scalar, avx2, avx512)"));
}

bool simd_level_supported(SimdLevel level) {
  if (level == SimdLevel::kAuto) return true;
  return ops::detail::kernel_table(level).adam != nullptr &&
         ops::detail::convert_table(level).to_fp16 != nullptr && cpu_has(level);
}

std::vector<SimdLevel> supported_simd_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : kConcreteLevels) {
    if (simd_level_supported(level)) levels.push_back(level);
  }
  return levels;
}

SimdLevel resolve_simd_level(SimdLevel requested) {
  SimdLevel level = requested;
  std::string source = "requested SIMD level";
  if (level == SimdLevel::kAuto) {
    const char* env = std::getenv(kSimdEnv);
    if (env == nullptr || *env == '\0') return supported_simd_levels().front();
    source = ::deepspeed::detail::str_cat("environment variable ", kSimdEnv);
    level = parse_simd_level(env, source);
    if (level == SimdLevel::kAuto) return supported_simd_levels().front();
  }
  DS_CHECK(
      simd_level_supported(level), source, " asks for '", simd_level_name(level),
      "' but this CPU or build lacks it (available: ",
      [] {
        std::string names;
        for (SimdLevel l : supported_simd_levels()) {
          names += names.empty() ? "" : ", ";
          names += simd_level_name(l);
        }
        return names;
      }(),
      ")");
  return level;
}

std::vector<std::string> kernel_report() {
  std::string active;
  std::string note;
  try {
    active = simd_level_name(resolve_simd_level(SimdLevel::kAuto));
    const char* env = std::getenv(kSimdEnv);
    if (env != nullptr && *env != '\0')
      note = ::deepspeed::detail::str_cat("forced by ", kSimdEnv, "; ");
  } catch (const Error& e) {
    active = "error";
    note = ::deepspeed::detail::str_cat(e.what(), "; ");
  }
  std::string others;
  for (SimdLevel level : supported_simd_levels()) {
    if (active == simd_level_name(level)) continue;
    others += others.empty() ? "" : ", ";
    others += simd_level_name(level);
  }
  const std::string tail = others.empty() ? "no other variant" : others + " available";
  auto line = [&](const char* name, const char* how) {
    // Dots pad every name to one column, as ds_report aligns DeepSpeed's op table.
    const std::string dots(std::max<size_t>(3, kReportColumn - std::strlen(name)), '.');
    return ::deepspeed::detail::str_cat(name, " ", dots, " ", active, " (", note, tail, ")", how);
  };
  std::vector<std::string> lines;
  for (const char* name : kKernelNames) lines.push_back(line(name, ""));
  const bool hardware_fp16 = active == "avx2" || active == "avx512";
  lines.push_back(
      line(kCopyBf16Name, ": fused fp32 -> bf16 param copy-back, round to nearest even"));
  lines.push_back(
      line(kCopyFp16Name, hardware_fp16 ? ": fused fp32 -> fp16 param copy-back, F16C vcvtps2ph"
                                        : ": fused fp32 -> fp16 param copy-back, round to nearest "
                                          "even in software"));
  return lines;
}

}  // namespace deepspeed::ops
