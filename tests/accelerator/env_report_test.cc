// ds_report's content: the facts that change speed or behaviour must be there and true.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>

#include "deepspeed/env_report.h"

namespace deepspeed {
namespace {

TEST(EnvReport, SetupInstalledOpenBlasAndItIsTheLoadedBlas) {
  // scripts/setup.sh installs OpenBLAS as libblas.so.3; the reference BLAS would make matmul ~20x slower.
  std::string blas = loaded_blas_library();
  ASSERT_FALSE(blas.empty()) << "LibTorch should have loaded a BLAS";
  EXPECT_NE(blas.find("openblas"), std::string::npos) << blas;
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
