// memory_breakdown (DeepSpeed's key): before and after each forward, backward and step, global rank 0 prints what
// DeepSpeed's see_memory_usage prints there: the point ("Engine before forward", ...), the accelerator's memory in GB
// (MA allocated, Max_MA its peak, CA what the allocator holds, cached included, Max_CA its peak; on CPU all four are
// the process's RSS and peak RSS, as DeepSpeed's CPU accelerator reports them), and the host's ("CPU Virtual Memory:
// used = MemTotal - MemAvailable, percent of MemTotal"). After each print the peaks are reset, as DeepSpeed does, so
// each print's peak covers what happened since the one before (and so does any peak read elsewhere meanwhile).
// The engine adds one observer for the "before" points first and one for the "after" points last, so that the
// printing stays outside what the other observers time (the flops profiler, the autotuning probe).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "deepspeed/accelerator.h"
#include "runtime/step_observer.h"

namespace deepspeed::runtime {

// The three lines one print writes, each ending in a newline.
std::string memory_usage_lines(const std::string& point, const accelerator::MemoryStats& device,
                               const accelerator::MemoryStats& host);

// The accelerator's counters: read, and their peaks reset.
struct MemoryCounters {
  std::function<accelerator::MemoryStats()> read;
  std::function<void()> reset_peak;
};

// get_accelerator()'s.
MemoryCounters accelerator_counters();

class MemoryObserver : public StepObserver {
 public:
  using Print = std::function<void(const std::string&)>;
  enum class Points { kBefore, kAfter };
  // Reports the `points` side of each phase; the lines go to `print`.
  MemoryObserver(MemoryCounters device, Print print, Points points);

  void begin_forward(int64_t global_steps) override { report(Points::kBefore, "Engine before forward"); }
  void end_forward() override { report(Points::kAfter, "Engine after forward"); }
  void begin_backward() override { report(Points::kBefore, "Engine before backward"); }
  void end_backward() override { report(Points::kAfter, "Engine after backward"); }
  void begin_step() override { report(Points::kBefore, "Engine before step"); }
  void end_step(bool boundary, int64_t global_steps) override { report(Points::kAfter, "Engine after step"); }

 private:
  void report(Points side, const char* point);

  MemoryCounters device_;
  Print print_;
  Points points_;
};

}  // namespace deepspeed::runtime
