// Hands the memory glibc keeps after frees back to the kernel (a no-op with other C libraries).
//
// Stage 3 builds each parameter whole and keeps only a shard, and its engine start flattens and partitions: glibc
// keeps freed blocks of these sizes in its heaps, resident for the rest of the run. Trimmed once at each of those
// two points.
//
// And after each backward on a CPU engine whose LibTorch allocator is glibc's (DS_HOST_ALLOCATOR=default; the
// engine's host block cache, accelerator/host_block_cache.h, keeps large blocks out of the heap and replaces this),
// once the step's peak has passed: gathering, releasing and reducing
// units of several MiB each (and Gloo's own scratch, in its threads' arenas) leave freed blocks scattered through
// glibc's heaps, and the next step's requests of other sizes grow the heaps past them instead of reusing them. On
// the 25.5M GPT at 2 ranks (bench/zero/run_zero_memory.sh) the peak RSS was ~770 MB without the trim against
// ~700 MB with it, stage 2's being ~730 MB; it costs 6-13% of a step on that box (re-faulting what was handed
// back). Measured alternatives: a fixed MALLOC_MMAP_THRESHOLD_ of 1-4 MiB (~690-705 MB, 16-20% of a step: every
// activation and autograd gradient above it is mapped and faulted afresh), MALLOC_ARENA_MAX (no change).
// DS_HEAP_TRIM=0 turns the per-step trim off; so does setting glibc's own MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES (the user manages the allocator).
#pragma once

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdlib>
#include <cstring>

namespace deepspeed::zero {

inline void release_freed_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

// Whether to trim after each backward (see above): glibc only, unless the environment opts out.
inline bool per_step_heap_trim_wanted() {
#ifdef __GLIBC__
  const char* own = std::getenv("DS_HEAP_TRIM");
  if (own != nullptr && *own != '\0') return std::strcmp(own, "0") != 0;
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(name) != nullptr) return false;
  return true;
#else
  return false;
#endif
}

}  // namespace deepspeed::zero
