// The bounded cache of large CPU blocks (host_block_cache.h).
#include "accelerator/host_block_cache.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::accelerator {

namespace {

constexpr size_t kPage = 4096;
constexpr int64_t kSlackDivisor = 32;

// Sizes round up to 1/8 steps between powers of two (at most 12.5% more than asked), whole pages: a step's
// requests of nearly equal sizes share a class.
size_t size_class(size_t n) {
  size_t power = 1;
  while (power * 2 <= n) power *= 2;
  const size_t step = std::max(power / 8, kPage);
  return (n + step - 1) / step * step;
}

class BlockCache final : public c10::Allocator {
 public:
  BlockCache(c10::Allocator* small, HostBlockCacheOptions options)
      : small_(small), small_deleter_(small->raw_deleter()), options_(options) {
    DS_CHECK(small_deleter_ != nullptr, "host memory: LibTorch's CPU allocator has no raw deleter");
  }

  c10::DataPtr allocate(size_t n) override {
    if (static_cast<int64_t>(n) < options_.min_block_bytes) return small_->allocate(n);
    const size_t bytes = size_class(n);
    void* ptr = take_cached(bytes);
    if (ptr == nullptr) ptr = map_fresh(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[ptr] = bytes;
      stats_.live_bytes += static_cast<int64_t>(bytes);
      peak_live_ = std::max(peak_live_, stats_.live_bytes);
    }
    return {ptr, ptr, &BlockCache::free_block, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  // The context is the pointer itself for large and small blocks alike, so raw_allocate / raw_deallocate work (a
  // wrapping allocator, e.g. a memory-counting one, uses them); give_back tells the two apart.
  c10::DeleterFnPtr raw_deleter() const override { return &BlockCache::free_block; }

  HostBlockCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    HostBlockCacheStats s = stats_;
    s.installed = true;
    return s;
  }

  void release_all() {
    std::vector<std::pair<void*, size_t>> unmapped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [ptr, bytes] : lru_) unmapped.emplace_back(ptr, bytes);
      lru_.clear();
      by_class_.clear();
      stats_.cached_bytes = 0;
    }
    for (const auto& [ptr, bytes] : unmapped) munmap(ptr, bytes);
  }

  static BlockCache* instance;

 private:
  using Entry = std::pair<void*, size_t>;

  void* take_cached(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = by_class_.find(bytes);
    if (it == by_class_.end() || it->second.empty()) {
      ++stats_.misses;
      return nullptr;
    }
    const auto entry = it->second.back();  // the most recently freed: its pages are the likeliest still warm
    it->second.pop_back();
    void* ptr = entry->first;
    lru_.erase(entry);
    stats_.cached_bytes -= static_cast<int64_t>(bytes);
    ++stats_.hits;
    return ptr;
  }

  static void free_block(void* ptr) { instance->give_back(ptr); }

  // A miss: fresh pages. Cached blocks go first while live + cached + this block would pass the largest live total
  // seen so far by more than 1/32: the cache fills what the peak already took, and raises it by 3% at most.
  // Measured on bench/zero's 25.5M GPT at stage 3, 2 ranks (12 steps, user + sys seconds of both ranks): no slack
  // (cache + live never above the live peak) 668-674 MiB and +4% page faults' CPU over a 16 MiB slack, which
  // measured 690 MiB at 402K faults against 794K.
  void* map_fresh(size_t bytes) {
    std::vector<Entry> unmapped;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const int64_t wanted = stats_.live_bytes + static_cast<int64_t>(bytes);
      const int64_t budget = std::max(peak_live_ + peak_live_ / kSlackDivisor, wanted);
      evict_while([&] { return wanted + stats_.cached_bytes > budget; }, unmapped);
    }
    for (const auto& [p, size] : unmapped) munmap(p, size);
    void* ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
      release_all();  // what the cache holds may be what the kernel lacks
      ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    DS_CHECK(ptr != MAP_FAILED, "host memory: cannot map ", bytes, " bytes for a tensor: ", std::strerror(errno));
    return ptr;
  }

  // Under the lock: takes the least recently freed blocks out of the cache while `over()`; the caller unmaps them
  // after unlocking (the kernel's work).
  template <typename Pred>
  void evict_while(Pred over, std::vector<Entry>& unmapped) {
    while (over() && !lru_.empty()) {
      const Entry oldest = lru_.front();
      auto& same = by_class_[oldest.second];
      same.erase(std::find(same.begin(), same.end(), lru_.begin()));
      lru_.pop_front();
      stats_.cached_bytes -= static_cast<int64_t>(oldest.second);
      unmapped.push_back(oldest);
    }
  }

  void give_back(void* ptr) {
    std::vector<Entry> unmapped;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto found = sizes_.find(ptr);
      if (found == sizes_.end()) {
        // A small block handed out through raw_allocate (the context is the pointer there too): the allocator
        // behind this one made it and frees it.
        lock.unlock();
        small_deleter_(ptr);
        return;
      }
      const size_t bytes = found->second;
      sizes_.erase(found);
      stats_.live_bytes -= static_cast<int64_t>(bytes);
      lru_.emplace_back(ptr, bytes);
      by_class_[bytes].push_back(std::prev(lru_.end()));
      stats_.cached_bytes += static_cast<int64_t>(bytes);
      // Over the bound: the least recently freed go back to the kernel (this block too, when it alone exceeds it).
      evict_while([&] { return stats_.cached_bytes > options_.cache_limit_bytes; }, unmapped);
    }
    for (const auto& [p, bytes] : unmapped) munmap(p, bytes);  // outside the lock: the kernel's work
  }

  c10::Allocator* small_;
  c10::DeleterFnPtr small_deleter_;
  HostBlockCacheOptions options_;
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  std::list<Entry> lru_;  // freed blocks, least recently freed first
  std::unordered_map<size_t, std::vector<std::list<Entry>::iterator>> by_class_;
  HostBlockCacheStats stats_;
  int64_t peak_live_ = 0;  // the most large-block bytes live at once
};

BlockCache* BlockCache::instance = nullptr;
std::mutex install_mutex;

}  // namespace

bool host_block_cache_wanted() {
  if (const char* own = std::getenv("DS_HOST_ALLOCATOR"); own != nullptr && *own != '\0') {
    const std::string value(own);
    DS_CHECK(value == "default" || value == "cache", "DS_HOST_ALLOCATOR must be 'cache' or 'default', got '", value,
             "'");
    return value == "cache";
  }
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(name) != nullptr) return false;
  return true;
}

HostBlockCacheOptions host_block_cache_options_from_env() {
  HostBlockCacheOptions options;
  if (const char* mb = std::getenv("DS_HOST_CACHE_MB"); mb != nullptr && *mb != '\0') {
    char* end = nullptr;
    const long long value = std::strtoll(mb, &end, 10);
    DS_CHECK(end != mb && *end == '\0' && value >= 0, "DS_HOST_CACHE_MB must be a whole number of MiB >= 0, got '", mb,
             "'");
    options.cache_limit_bytes = static_cast<int64_t>(value) << 20;
  }
  return options;
}

bool install_host_block_cache(const HostBlockCacheOptions& options) {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (BlockCache::instance != nullptr) return false;
  // Someone installed an allocator of their own (a memory-counting test, an application's): it stays.
  if (c10::GetCPUAllocator() != c10::GetDefaultCPUAllocator()) return false;
  // Never deleted: tensors it allocated may outlive every engine, and their deleter calls it.
  BlockCache::instance = new BlockCache(c10::GetCPUAllocator(), options);
  c10::SetCPUAllocator(BlockCache::instance, /*priority=*/100);
  return true;
}

HostBlockCacheStats host_block_cache_stats() {
  std::lock_guard<std::mutex> lock(install_mutex);
  return BlockCache::instance == nullptr ? HostBlockCacheStats{} : BlockCache::instance->stats();
}

void release_host_block_cache() {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (BlockCache::instance != nullptr) BlockCache::instance->release_all();
}

void configure_host_memory(bool report) {
  if (!host_block_cache_wanted()) return;
  const HostBlockCacheOptions options = host_block_cache_options_from_env();
  if (!install_host_block_cache(options) || !report) return;
  std::fprintf(stderr,
               "deepspeed: host memory: tensors of %lld KiB or more are mapped on their own; freed ones are kept for "
               "reuse while live + kept stay within the live peak + 1/32 and %lld MiB (DS_HOST_CACHE_MB; "
               "DS_HOST_ALLOCATOR=default keeps LibTorch's allocator)\n",
               static_cast<long long>(options.min_block_bytes >> 10),
               static_cast<long long>(options.cache_limit_bytes >> 20));
}

}  // namespace deepspeed::accelerator
