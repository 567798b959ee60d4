#include "runtime/worker_thread.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include "deepspeed/accelerator.h"

namespace deepspeed::runtime {

WorkerThreadSetup WorkerThreadSetup::of_caller(int omp_threads) {
  auto& acc = accelerator::get_accelerator();
  return WorkerThreadSetup{acc.device().is_cpu() ? -1 : acc.current_device(), omp_threads};
}

void WorkerThreadSetup::apply() const {
  if (device >= 0) accelerator::get_accelerator().set_device(device);
  if (omp_threads > 0) {
    // LibTorch sets a new thread's OpenMP count at its first parallel region (to the process-wide count): that
    // first, then this thread's own count, which OpenMP keeps per thread (the starting thread's is left as it is).
    (void)at::get_num_threads();
    omp_set_num_threads(omp_threads);
  }
}

}  // namespace deepspeed::runtime
