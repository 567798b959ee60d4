// ds_report's content: the facts that change speed or behaviour must be there and true.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "accelerator/env_report.h"
#include "deepspeed/accelerator.h"

namespace deepspeed {
namespace {

bool accelerator_names_include_cuda() {
  return accelerator::available_accelerators().find("cuda") != std::string::npos;
}

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

TEST(EnvReport, GpuSectionSaysWhatCudaThisBuildHasAndThatNoDeviceIsVisible) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // read when CUDA starts: none visible, even on a GPU machine
  const std::string text = format_report_section(gpu_report());
  ASSERT_EQ(text.rfind("GPU:\n", 0), 0u) << text;
  const bool cuda_build = accelerator_names_include_cuda();
  if (!cuda_build) {
    EXPECT_NE(text.find("CUDA in LibTorch ........ no"), std::string::npos) << text;
    return;
  }
  // A CUDA LibTorch (PyPI's): its runtime version, the driver line, NCCL's version, zero devices.
  EXPECT_TRUE(std::regex_search(text, std::regex("CUDA in LibTorch \\.+ yes, runtime [0-9]+\\.[0-9]+\n"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("CUDA driver \\.+ (supports CUDA [0-9]+\\.[0-9]+|none)"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex("NCCL \\.+ [0-9]+\\.[0-9]+\\.[0-9]+"))) << text;
  EXPECT_NE(text.find("GPUs visible ............ 0 (CUDA_VISIBLE_DEVICES '')"), std::string::npos) << text;
}

}  // namespace
}  // namespace deepspeed
