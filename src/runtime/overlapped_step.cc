#include "runtime/overlapped_step.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include <utility>

#include "deepspeed/accelerator.h"
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
  // The caller's device, bound in the new thread too: a CUDA call there (an event wait) would otherwise run on
  // device 0 and open a context there for every rank of a multi-GPU node.
  auto& acc = accelerator::get_accelerator();
  const int device = acc.device().is_cpu() ? -1 : acc.current_device();
  result_ = std::async(std::launch::async, [work = std::move(work), omp_threads, device] {
    if (device >= 0) accelerator::get_accelerator().set_device(device);
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
