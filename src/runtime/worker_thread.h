// What a background optimizer thread (overlap_step's, super_offload's) sets up before its work: the accelerator
// device of the thread that started it (a CUDA call on an unbound thread would run on device 0, opening a context
// there for every rank of a multi-GPU node) and an OpenMP count of its own for the CPU optimizer's kernels.
#pragma once

namespace deepspeed::runtime {

struct WorkerThreadSetup {
  int device = -1;      // the starting thread's device; -1 on a CPU accelerator
  int omp_threads = 0;  // > 0: the new thread's OpenMP count; 0 keeps LibTorch's

  // Read on the starting thread.
  static WorkerThreadSetup of_caller(int omp_threads);
  // First thing on the new thread.
  void apply() const;
};

}  // namespace deepspeed::runtime
