// Chooses the process-wide accelerator once (DS_ACCELERATOR, else detection) and hands it out.
#include <sched.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "accelerator/cpu_accelerator.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#ifdef DS_WITH_CUDA
#include "accelerator/cuda_accelerator.h"
#endif

namespace deepspeed::accelerator {
namespace {

std::unique_ptr<Accelerator> make_accelerator() {
  const char* forced = std::getenv("DS_ACCELERATOR");
  std::string want = forced ? forced : "";
  if (want == "cpu") return std::make_unique<CpuAccelerator>();
#ifdef DS_WITH_CUDA
  if (want == "cuda") return std::make_unique<CudaAccelerator>();
  if (want.empty() && CudaAccelerator::is_available()) return std::make_unique<CudaAccelerator>();
#endif
  DS_CHECK(want.empty(), "DS_ACCELERATOR=", want, " is not available in this build (available: ",
           available_accelerators(), ")");
  return std::make_unique<CpuAccelerator>();
}

}  // namespace

Accelerator& get_accelerator() {
  static std::once_flag once;
  static std::unique_ptr<Accelerator> instance;
  std::call_once(once, [] { instance = make_accelerator(); });
  return *instance;
}

int host_threads_per_rank(int local_world_size) {
  DS_CHECK(local_world_size >= 1, "local_world_size must be >= 1, got ", local_world_size);
  int cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  int per_rank = cores / local_world_size;
  return per_rank < 1 ? 1 : per_rank;
}

std::string available_accelerators() {
#ifdef DS_WITH_CUDA
  return "cpu, cuda";
#else
  return "cpu";
#endif
}

}  // namespace deepspeed::accelerator
