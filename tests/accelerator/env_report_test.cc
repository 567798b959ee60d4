// ds_report's content: the facts that change speed or behaviour must be there and true.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>

#include "accelerator/env_report.h"

namespace deepspeed {
namespace {

TEST(EnvReport, LibTorchRunsOnAnOptimizedBlas) {
  // PyPI's LibTorch has MKL inside; a distribution's LibTorch loads libblas.so.3, which must be OpenBLAS (or MKL),
  // not the reference BLAS that makes matmul ~20x slower (FACTS.md).
  std::string blas = loaded_blas_library();
  ASSERT_FALSE(blas.empty()) << "LibTorch should say which BLAS it uses";
  EXPECT_TRUE(blas.find("openblas") != std::string::npos || blas.find("mkl") != std::string::npos) << blas;
}

TEST(EnvReport, ReportsTheLinesUsersNeed) {
  at::set_num_threads(1);
  std::string text = format_environment_report();
  for (const char* name : {"deepspeed-cpp version", "torch version", "accelerator", "communication backend ... gloo",
                           "BLAS library", "intra-op threads ........ 1 now", "CPU SIMD"}) {
    EXPECT_NE(text.find(name), std::string::npos) << "missing '" << name << "' in\n" << text;
  }
}

}  // namespace
}  // namespace deepspeed
