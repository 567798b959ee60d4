// A CPU allocator for tests that measure memory: counts the bytes live (and their peak) in LibTorch CPU
// allocations while installed, delegating to the allocator it replaced.
#pragma once

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <cstring>

// Counts the bytes live in CPU allocations while installed, delegating to the allocator it
// replaced. Some kernels use the raw interface (context == data), so each block carries a small
// header in front of the data.
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    auto* block = static_cast<uint8_t*>(base_->raw_allocate(n + kHeader));
    auto* header = reinterpret_cast<Header*>(block);
    header->bytes = static_cast<int64_t>(n);
    header->owner = this;
    header->base_deleter = base_->raw_deleter();
    const int64_t now = live_ += header->bytes;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    void* data = block + kHeader;
    return {data, data, &CountingAllocator::release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_ = live_.load(); }

  // Installs the counter for the scope of the guard.
  struct Scope {
    explicit Scope(CountingAllocator* a) : counting(a) {
      counting->base_ = c10::GetCPUAllocator();
      c10::SetCPUAllocator(counting, kPriority);
    }
    ~Scope() { c10::SetCPUAllocator(counting->base_, kPriority); }
    CountingAllocator* counting;
  };

 private:
  static constexpr uint8_t kPriority = 100;
  static constexpr size_t kHeader = 64;  // keeps the data as aligned as the block
  struct Header {
    int64_t bytes;
    const CountingAllocator* owner;
    c10::DeleterFnPtr base_deleter;
  };
  static void release(void* data) {
    uint8_t* block = static_cast<uint8_t*>(data) - kHeader;
    auto* header = reinterpret_cast<Header*>(block);
    header->owner->live_ -= header->bytes;
    header->base_deleter(block);
  }
  c10::Allocator* base_ = nullptr;
  mutable std::atomic<int64_t> live_{0};
  mutable std::atomic<int64_t> peak_{0};
};

