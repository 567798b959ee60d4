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
  if (want == "cuda") {
    DS_CHECK(CudaAccelerator::is_available(), "DS_ACCELERATOR=cuda, but no CUDA device is visible (check the driver "
             "and CUDA_VISIBLE_DEVICES, or set DS_ACCELERATOR=cpu)");
    return std::make_unique<CudaAccelerator>();
  }
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

void Stream::wait_stream(const Stream& other) const {
  auto fence = get_accelerator().new_event();
  fence->record(&other);
  wait_event(*fence);
}

int device_for_local_rank(int local_rank, int device_count, bool share_devices) {
  DS_CHECK(local_rank >= 0, "LOCAL_RANK must be >= 0, got ", local_rank);
  DS_CHECK(device_count >= 1, "no device visible to bind LOCAL_RANK ", local_rank, " to");
  if (local_rank < device_count) return local_rank;
  DS_CHECK(share_devices, "LOCAL_RANK ", local_rank, " has no device of its own: ", device_count,
           " visible (CUDA_VISIBLE_DEVICES); start at most ", device_count,
           " ranks per host, or set DS_SHARE_DEVICES=1 to share devices round-robin");
  return local_rank % device_count;
}

void bind_local_device(int local_rank) {
  Accelerator& acc = get_accelerator();
  const char* share = std::getenv("DS_SHARE_DEVICES");
  const std::string s = share ? share : "";
  DS_CHECK(s.empty() || s == "0" || s == "1", "DS_SHARE_DEVICES must be 0 or 1, got '", s, "'");
  if (acc.device().is_cpu()) return;  // every local rank shares the host
  acc.set_device(device_for_local_rank(local_rank, acc.device_count(), s == "1"));
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
