// Hands the memory glibc keeps after frees back to the kernel (a no-op with other C libraries). Stage 3 builds
// each parameter whole and keeps only a shard, and its engine start flattens and partitions; glibc keeps freed
// blocks of these sizes in its heaps, resident for the rest of the run (on the 25.4M GPT at 2 ranks, more than
// the memory stage 3 exists to save). Called once at each of those two points, never per step.
#pragma once

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace deepspeed::zero {

inline void release_freed_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace deepspeed::zero
