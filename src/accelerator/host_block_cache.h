// LibTorch's CPU allocator for large tensors, replaced by one that keeps a bounded cache of freed blocks.
//
// Why: LibTorch's default CPU allocator is the C library's (posix_memalign). glibc raises its mmap threshold to the
// size of each large block freed (up to 32 MiB), so after the first step every activation, gathered unit and
// gradient bucket of a few MiB lives in its heaps; freed, they stay resident, and the next step's requests of other
// sizes grow the heaps past them. On the 25.5M GPT of bench/zero/run_zero_memory.sh at 2 ranks, ZeRO-3's peak RSS
// was ~815 MiB that way against stage 0's ~845 (a quarter of the formula's saving). Handing the heaps back after
// each backward (malloc_trim) or a fixed mmap threshold cost 6-20% of a step: every block is faulted in afresh.
//
// Here a block of at least `min_block_bytes` gets its own anonymous mapping, and a freed block waits in a cache
// (keyed by size class: 1/8 steps between powers of two) for the next request of its class, which reuses its pages
// without faulting. A training step repeats its sizes, so most requests hit. The cache is bounded twice: live plus
// cached blocks never pass the largest live total seen so far by more than 1/32 (a miss unmaps the least recently
// freed blocks first), so the cache does not raise the step's peak; and it never holds more than
// `cache_limit_bytes`. Smaller requests go to the allocator that was installed before (glibc's heap).
//
// Installed by the engine on a CPU device (runtime, once per process). Opt out: DS_HOST_ALLOCATOR=default, or any of
// glibc's own MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, GLIBC_TUNABLES (the user manages the allocator).
// DS_HOST_CACHE_MB sets the second bound (default 256).
#pragma once

#include <cstdint>

namespace deepspeed::accelerator {

struct HostBlockCacheOptions {
  int64_t min_block_bytes = int64_t{128} << 10;  // glibc's own first mmap threshold
  int64_t cache_limit_bytes = int64_t{256} << 20;
};

struct HostBlockCacheStats {
  bool installed = false;
  int64_t live_bytes = 0;    // large blocks in use
  int64_t cached_bytes = 0;  // freed large blocks kept for reuse
  int64_t hits = 0;          // requests served from the cache
  int64_t misses = 0;        // requests that mapped fresh pages
};

// Whether the environment leaves the allocator to the library (see above).
bool host_block_cache_wanted();
// The options the environment asks for (DS_HOST_CACHE_MB).
HostBlockCacheOptions host_block_cache_options_from_env();
// Makes the cache LibTorch's CPU allocator, in front of LibTorch's default one. False, changing nothing, when it is
// installed already or another allocator than LibTorch's default is (the application's own stays).
bool install_host_block_cache(const HostBlockCacheOptions& options);
HostBlockCacheStats host_block_cache_stats();
// Unmaps every cached block (live ones stay).
void release_host_block_cache();
// What an engine on a CPU device calls at start: installs the cache unless the environment opts out; `report`
// (global rank 0) prints what it chose, once per process.
void configure_host_memory(bool report);

}  // namespace deepspeed::accelerator
