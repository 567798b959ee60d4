// ds_report's "OpenMP" section: how many threads LibTorch's CPU kernels and our fused optimizers
// run with, and what sets that number.
#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "deepspeed/accelerator.h"
#include "accelerator/env_report.h"

namespace deepspeed {
namespace {

// Variables that change the thread count or placement of LibTorch's OpenMP pool, or the engine's
// choice of it.
constexpr const char* kThreadEnv[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS",   "OMP_PROC_BIND",
                                      "OMP_PLACES",      "GOMP_CPU_AFFINITY", "LOCAL_WORLD_SIZE"};

std::string parallel_backend() {
#if AT_PARALLEL_OPENMP
  return at::get_openmp_version();
#elif AT_PARALLEL_NATIVE_TBB
  return "TBB";
#else
  return "native thread pool";
#endif
}

// What Engine's configure_threads() (src/runtime/engine_build.cc) will set: the user's OMP_NUM_THREADS
// wins; otherwise this host's cores shared among LOCAL_WORLD_SIZE ranks.
std::string engine_threads() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    return std::string("LibTorch's count, as OMP_NUM_THREADS=") + omp + " is set";
  }
  int local_world_size = 1;
  if (const char* lws = std::getenv("LOCAL_WORLD_SIZE")) {
    char* end = nullptr;
    long v = std::strtol(lws, &end, 10);
    if (end == lws || *end != '\0' || v < 1 || v > 1000000) {
      return std::string("unknown: LOCAL_WORLD_SIZE=") + lws + " is not a positive integer";
    }
    local_world_size = static_cast<int>(v);
  }
  return std::to_string(accelerator::host_threads_per_rank(local_world_size)) +
         " intra-op threads per rank (" + std::to_string(accelerator::host_threads_per_rank(1)) +
         " cores / LOCAL_WORLD_SIZE " + std::to_string(local_world_size) + ")";
}

}  // namespace

ReportSection threads_report() {
  ReportSection section{"OpenMP", {}};
  auto& lines = section.lines;
  lines.emplace_back("parallel backend", parallel_backend());
  lines.emplace_back("intra-op threads",
                     std::to_string(at::get_num_threads()) + " (at::get_num_threads)");
  lines.emplace_back("inter-op threads", std::to_string(at::get_num_interop_threads()) +
                                             " (at::get_num_interop_threads)");
  lines.emplace_back("OpenMP max threads",
                     std::to_string(omp_get_max_threads()) + " (omp_get_max_threads)");
  lines.emplace_back("engine will use", engine_threads());
  for (const char* name : kThreadEnv) {
    const char* value = std::getenv(name);
    lines.emplace_back(name, value ? value : "not set");
  }
  return section;
}

}  // namespace deepspeed
