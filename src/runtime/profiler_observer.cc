// See profiler_observer.h.
#include "runtime/profiler_observer.h"

#include <cstdio>
#include <exception>

namespace deepspeed::runtime {

ProfilerObserver::ProfilerObserver(std::unique_ptr<profiling::StepProfiler> profiler)
    : profiler_(std::move(profiler)) {}

void ProfilerObserver::call(const std::function<void(profiling::StepProfiler&)>& f) {
  if (!profiler_) return;
  try {
    f(*profiler_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepspeed: flops_profiler turned off: %s\n", e.what());
    profiler_.reset();
  }
}

void ProfilerObserver::begin_forward(int64_t global_steps) {
  call([&](profiling::StepProfiler& p) { p.begin_forward(global_steps); });
}
void ProfilerObserver::end_forward() {
  call([](profiling::StepProfiler& p) { p.end_forward(); });
}
void ProfilerObserver::begin_backward() {
  call([](profiling::StepProfiler& p) { p.begin_backward(); });
}
void ProfilerObserver::end_backward() {
  call([](profiling::StepProfiler& p) { p.end_backward(); });
}
void ProfilerObserver::begin_step() {
  call([](profiling::StepProfiler& p) { p.begin_step(); });
}
void ProfilerObserver::end_step(bool boundary, int64_t global_steps) {
  call([&](profiling::StepProfiler& p) { p.end_step(boundary, global_steps); });
}

}  // namespace deepspeed::runtime
