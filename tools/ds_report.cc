// ds_report: prints the environment deepspeed-cpp runs in (paste it into bug reports): versions, accelerator,
// collective backend, the BLAS LibTorch loaded, threads, and which SIMD variant each fused kernel runs here.
#include <deepspeed/env_report.h>
#include <deepspeed/ops.h>

#include <iostream>

int main() {
  std::cout << deepspeed::format_environment_report();
  std::cout << "fused CPU optimizer kernels (DS_SIMD=scalar|avx2|avx512 forces a variant):\n";
  for (const auto& line : deepspeed::ops::kernel_report()) std::cout << "  " << line << "\n";
  return 0;
}
