#include "accelerator/cpu_accelerator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

#include "deepspeed/error.h"

namespace deepspeed::accelerator {
namespace {

// Reads "<key>: <value> kB" from a /proc file such as /proc/meminfo or /proc/self/status; -1 when absent.
int64_t read_proc_kib(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':') {
      std::istringstream fields(line.substr(key.size() + 1));
      int64_t kib = -1;
      fields >> kib;
      return kib;
    }
  }
  return -1;
}

int64_t kib_to_bytes(int64_t kib) { return kib < 0 ? 0 : kib * 1024; }

}  // namespace

c10::Device CpuAccelerator::device(int index) const {
  DS_CHECK(index == -1 || index == 0, "cpu accelerator has one device (index 0), got index ", index);
  return c10::Device(c10::kCPU);
}

void CpuAccelerator::set_device(int index) {
  // Every local rank shares the one CPU "device"; LOCAL_RANK > 0 is normal here, so any index >= 0 is accepted.
  DS_CHECK(index >= 0, "set_device: device index must be >= 0, got ", index);
}

MemoryStats CpuAccelerator::memory_stats(int index) const {
  MemoryStats stats;
  stats.total_bytes = kib_to_bytes(read_proc_kib("/proc/meminfo", "MemTotal"));
  stats.available_bytes = kib_to_bytes(read_proc_kib("/proc/meminfo", "MemAvailable"));
  stats.allocated_bytes = kib_to_bytes(read_proc_kib("/proc/self/status", "VmRSS"));
  stats.peak_allocated_bytes = kib_to_bytes(read_proc_kib("/proc/self/status", "VmHWM"));
  return stats;
}

void CpuAccelerator::reset_peak_memory_stats(int index) {
  // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0). Best effort: some sandboxes forbid it,
  // and then the peak simply keeps covering the whole process lifetime.
  std::ofstream clear("/proc/self/clear_refs");
  if (clear) clear << "5";
}

at::Generator CpuAccelerator::default_generator(int index) const {
  return at::detail::getDefaultCPUGenerator();
}

void CpuAccelerator::manual_seed(uint64_t seed) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

at::Tensor CpuAccelerator::get_rng_state(int index) const {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return at::Tensor(gen.get_state());
}

void CpuAccelerator::set_rng_state(const at::Tensor& state, int index) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace deepspeed::accelerator
