#include "runtime/overlapped_step.h"

#include <utility>

#include "deepspeed/error.h"
#include "runtime/worker_thread.h"

namespace deepspeed::runtime {

OverlappedStep::~OverlappedStep() {
  try {
    wait();
  } catch (...) {
  }
}

void OverlappedStep::launch(std::function<void()> work, int omp_threads) {
  DS_ASSERT(!pending(), "an overlapped optimizer step is still running");
  // The caller's device too: the work's masters() waits on a CUDA event after a GPU publish.
  result_ = std::async(std::launch::async, [work = std::move(work), setup = WorkerThreadSetup::of_caller(omp_threads)] {
    setup.apply();
    work();
  });
}

void OverlappedStep::wait() {
  if (!result_.valid()) return;
  std::future<void> done = std::move(result_);  // no longer pending, even when it threw
  done.get();
}

}  // namespace deepspeed::runtime
