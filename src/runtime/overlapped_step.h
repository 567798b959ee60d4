// offload_optimizer.overlap_step: the CPU optimizer's step of one training step runs on a background thread while
// the next step's forward and backward run; the engine lands it (waits, then publishes the updated masters) at the
// start of that next step's optimizer step, or before anything that reads or writes the masters (checkpoints).
#pragma once

#include <functional>
#include <future>

namespace deepspeed::runtime {

class OverlappedStep {
 public:
  OverlappedStep() = default;
  OverlappedStep(const OverlappedStep&) = delete;
  OverlappedStep& operator=(const OverlappedStep&) = delete;
  // Waits for a step still running: it reads and writes tensors its owner is about to free. An error it raised is
  // dropped then (nothing is left to report it to).
  ~OverlappedStep();

  // Starts `work` on its own thread. One at a time: the previous step must have been waited for. `omp_threads` > 0
  // sets that thread's OpenMP count (the CPU optimizer's kernels) before `work` runs; 0 keeps LibTorch's.
  void launch(std::function<void()> work, int omp_threads = 0);
  bool pending() const { return result_.valid(); }
  // Blocks until the launched work has finished; rethrows what it threw. Nothing pending: returns at once.
  void wait();

 private:
  std::future<void> result_;
};

}  // namespace deepspeed::runtime
