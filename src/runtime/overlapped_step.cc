#include "runtime/overlapped_step.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include <utility>

#include "deepspeed/error.h"

namespace deepspeed::runtime {

OverlappedStep::~OverlappedStep() {
  try {
    wait();
  } catch (...) {
  }
}

void OverlappedStep::launch(std::function<void()> work, int omp_threads) {
  DS_ASSERT(!pending(), "an overlapped optimizer step is still running");
  result_ = std::async(std::launch::async, [work = std::move(work), omp_threads] {
    if (omp_threads > 0) {
      // LibTorch sets a new thread's OpenMP count at its first parallel region: that first, then this thread's own
      // count, which OpenMP keeps per thread.
      (void)at::get_num_threads();
      omp_set_num_threads(omp_threads);
    }
    work();
  });
}

void OverlappedStep::wait() {
  if (!result_.valid()) return;
  std::future<void> done = std::move(result_);  // no longer pending, even when it threw
  done.get();
}

}  // namespace deepspeed::runtime
