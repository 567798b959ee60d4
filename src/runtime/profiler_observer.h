// The flops profiler (profiling/step_profiler.h) as a step observer. It runs on global rank 0 alone, so a failure
// there (its output file, another profiler active) must not stop rank 0 while the others wait in a collective: it
// is reported on stderr and the profiler turns itself off.
#pragma once

#include <functional>
#include <memory>

#include "profiling/step_profiler.h"
#include "runtime/step_observer.h"

namespace deepspeed::runtime {

class ProfilerObserver : public StepObserver {
 public:
  explicit ProfilerObserver(std::unique_ptr<profiling::StepProfiler> profiler);

  void begin_forward(int64_t global_steps) override;
  void end_forward() override;
  void begin_backward() override;
  void end_backward() override;
  void begin_step() override;
  void end_step(bool boundary, int64_t global_steps) override;

 private:
  void call(const std::function<void(profiling::StepProfiler&)>& f);

  std::unique_ptr<profiling::StepProfiler> profiler_;  // null once turned off
};

}  // namespace deepspeed::runtime
