#include "accelerator/cpu_accelerator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <chrono>
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

// Work on CPU runs when issued: the one queue is always finished, and nothing needs to wait.
class CpuStream final : public Stream {
 public:
  void synchronize() const override {}
  bool query() const override { return true; }
  void wait_event(const Event& event) const override {}
  c10::Stream native() const override { return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU)); }
};

// A recorded event is complete at once; its time is the host's clock when it was recorded.
class CpuEvent final : public Event {
 public:
  explicit CpuEvent(bool timing) : timing_(timing) {}

  void record(const Stream* stream) override {
    recorded_ = true;
    at_ = std::chrono::steady_clock::now();
  }
  bool query() const override { return recorded_; }
  void synchronize() const override {}
  double elapsed_ms(const Event& end) const override {
    const auto* other = dynamic_cast<const CpuEvent*>(&end);
    DS_CHECK(other != nullptr, "elapsed_ms: the end event belongs to another accelerator");
    DS_CHECK(timing_ && other->timing_, "elapsed_ms: both events must be made with enable_timing");
    DS_CHECK(recorded_ && other->recorded_, "elapsed_ms: both events must be recorded first");
    return std::chrono::duration<double, std::milli>(other->at_ - at_).count();
  }

 private:
  bool timing_;
  bool recorded_ = false;
  std::chrono::steady_clock::time_point at_;
};

}  // namespace

at::Tensor CpuAccelerator::empty_pinned(at::IntArrayRef sizes, at::ScalarType dtype) const {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kCPU));  // nothing to pin for
}

std::unique_ptr<Stream> CpuAccelerator::new_stream(int index) const {
  (void)device(index);  // range check, as on every other accelerator
  return std::make_unique<CpuStream>();
}

std::unique_ptr<Event> CpuAccelerator::new_event(bool enable_timing) const {
  return std::make_unique<CpuEvent>(enable_timing);
}

c10::Device CpuAccelerator::device(int index) const {
  DS_CHECK(index == -1 || index == 0, "cpu accelerator has one device (index 0), got index ", index);
  return c10::Device(c10::kCPU);
}

void CpuAccelerator::set_device(int index) {
  // Every local rank shares the one CPU "device"; LOCAL_RANK > 0 is normal here, so any index >= 0 is accepted.
  DS_CHECK(index >= 0, "set_device: device index must be >= 0, got ", index);
}

MemoryStats host_memory_stats() {
  MemoryStats stats;
  stats.total_bytes = kib_to_bytes(read_proc_kib("/proc/meminfo", "MemTotal"));
  stats.available_bytes = kib_to_bytes(read_proc_kib("/proc/meminfo", "MemAvailable"));
  stats.allocated_bytes = kib_to_bytes(read_proc_kib("/proc/self/status", "VmRSS"));
  stats.peak_allocated_bytes = kib_to_bytes(read_proc_kib("/proc/self/status", "VmHWM"));
  stats.reserved_bytes = stats.allocated_bytes;
  stats.peak_reserved_bytes = stats.peak_allocated_bytes;
  return stats;
}

MemoryStats CpuAccelerator::memory_stats(int index) const { return host_memory_stats(); }

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
