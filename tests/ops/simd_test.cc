// SIMD-level selection: names, DS_SIMD, explicit levels, and the kernel report ds_report prints.
#include "deepspeed/ops/simd.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "deepspeed/ops/cpu_optimizer.h"
#include "test_util.h"

namespace deepspeed::ops {
namespace {

using testing::ScopedEnv;

const std::vector<SimdLevel> kAllLevels = {SimdLevel::kAuto, SimdLevel::kScalar, SimdLevel::kAvx2,
                                           SimdLevel::kAvx512};

TEST(SimdTest, NamesRoundTrip) {
  for (SimdLevel level : kAllLevels) EXPECT_EQ(parse_simd_level(simd_level_name(level)), level);
  try {
    parse_simd_level("sse9", "DS_SIMD");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DS_SIMD: unknown SIMD level 'sse9'"), std::string::npos)
        << e.what();
  }
}

TEST(SimdTest, SupportedLevelsMatchTheCpuBestFirst) {
  const std::vector<SimdLevel> levels = supported_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.back(), SimdLevel::kScalar);
#if defined(__x86_64__)
  std::vector<SimdLevel> expected;
  if (__builtin_cpu_supports("avx512f")) expected.push_back(SimdLevel::kAvx512);
  if (__builtin_cpu_supports("avx2")) expected.push_back(SimdLevel::kAvx2);
  expected.push_back(SimdLevel::kScalar);
  EXPECT_EQ(levels, expected);
#endif
}

TEST(SimdTest, AutoPicksTheBestUnlessDsSimdSaysOtherwise) {
  {
    ScopedEnv env("DS_SIMD", std::nullopt);
    EXPECT_EQ(resolve_simd_level(), supported_simd_levels().front());
  }
  for (SimdLevel level : supported_simd_levels()) {
    ScopedEnv env("DS_SIMD", simd_level_name(level));
    EXPECT_EQ(resolve_simd_level(), level);
    // An explicit level beats the environment.
    EXPECT_EQ(resolve_simd_level(SimdLevel::kScalar), SimdLevel::kScalar);
  }
}

TEST(SimdTest, BadDsSimdThrowsFromTheStepNamingTheVariable) {
  ScopedEnv env("DS_SIMD", "avx9000");
  at::Tensor p = at::zeros({4});
  try {
    adam_step(p, p.clone(), p.clone(), p.clone(), AdamParams(), 1);
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("DS_SIMD"), std::string::npos) << what;
    EXPECT_NE(what.find("avx9000"), std::string::npos) << what;
  }
}

TEST(SimdTest, UnsupportedLevelsAreRejected) {
  const std::vector<SimdLevel> supported = supported_simd_levels();
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    const bool ok = std::find(supported.begin(), supported.end(), level) != supported.end();
    EXPECT_EQ(simd_level_supported(level), ok);
    if (!ok) {
      EXPECT_THROW(resolve_simd_level(level), Error);
      ScopedEnv env("DS_SIMD", simd_level_name(level));
      EXPECT_THROW(resolve_simd_level(), Error);
    }
  }
}

TEST(SimdTest, KernelReportNamesEveryKernelAndTheActiveVariant) {
  ScopedEnv env("DS_SIMD", std::nullopt);
  const std::vector<std::string> lines = kernel_report();
  const std::vector<std::string> kernels = {"cpu_adam ", "cpu_sgd ",       "cpu_adagrad ",
                                            "cpu_lion ", "cpu_copy_bf16 ", "cpu_copy_fp16 "};
  ASSERT_EQ(lines.size(), kernels.size());
  const std::string best = simd_level_name(supported_simd_levels().front());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(kernels[i], 0), 0u) << lines[i];
    EXPECT_NE(lines[i].find("... " + best + " ("), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("scalar"), std::string::npos) << lines[i];
    // The copy-back lines say what they are and how fp16 is converted on this level.
    if (kernels[i].rfind("cpu_copy", 0) == 0) {
      EXPECT_NE(lines[i].find("copy-back"), std::string::npos) << lines[i];
    }
  }
  EXPECT_NE(lines.back().find(best == "scalar" ? "in software" : "F16C"), std::string::npos)
      << lines.back();
}

TEST(SimdTest, KernelReportShowsForcedAndBadDsSimdWithoutThrowing) {
  {
    ScopedEnv env("DS_SIMD", "scalar");
    for (const std::string& line : kernel_report()) {
      EXPECT_NE(line.find(" scalar (forced by DS_SIMD"), std::string::npos) << line;
    }
  }
  {
    ScopedEnv env("DS_SIMD", "bogus");
    std::vector<std::string> lines;
    EXPECT_NO_THROW(lines = kernel_report());
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines[0].find("error"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("bogus"), std::string::npos) << lines[0];
  }
}

}  // namespace
}  // namespace deepspeed::ops
