#include "runtime/memory_observer.h"

#include <cstdio>
#include <utility>

namespace deepspeed::runtime {
namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

std::string memory_usage_lines(const std::string& point, const accelerator::MemoryStats& device,
                               const accelerator::MemoryStats& host) {
  char line[256];
  std::string out = point + "\n";
  std::snprintf(line, sizeof(line), "MA %.2f GB  Max_MA %.2f GB  CA %.2f GB  Max_CA %.2f GB\n",
                gib(device.allocated_bytes), gib(device.peak_allocated_bytes), gib(device.reserved_bytes),
                gib(device.peak_reserved_bytes));
  out += line;
  const int64_t used = host.total_bytes - host.available_bytes;
  const double percent = host.total_bytes > 0 ? 100.0 * static_cast<double>(used) / host.total_bytes : 0.0;
  std::snprintf(line, sizeof(line), "CPU Virtual Memory:  used = %.2f GB, percent = %.1f%%\n", gib(used), percent);
  return out + line;
}

MemoryCounters accelerator_counters() {
  return {[] { return accelerator::get_accelerator().memory_stats(); },
          [] { accelerator::get_accelerator().reset_peak_memory_stats(); }};
}

MemoryObserver::MemoryObserver(MemoryCounters device, Print print, Points points)
    : device_(std::move(device)), print_(std::move(print)), points_(points) {}

void MemoryObserver::report(Points side, const char* point) {
  if (side != points_) return;
  print_(memory_usage_lines(point, device_.read(), accelerator::host_memory_stats()));
  device_.reset_peak();
}

}  // namespace deepspeed::runtime
