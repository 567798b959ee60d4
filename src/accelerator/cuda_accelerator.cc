#include "accelerator/cuda_accelerator.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "deepspeed/error.h"

namespace deepspeed::accelerator {

bool CudaAccelerator::is_available() { return c10::cuda::device_count() > 0; }

c10::Device CudaAccelerator::device(int index) const {
  int idx = resolve(index);
  DS_CHECK(idx < device_count(), "cuda device index ", idx, " out of range (", device_count(), " devices)");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(idx));
}

int CudaAccelerator::device_count() const { return static_cast<int>(c10::cuda::device_count()); }

int CudaAccelerator::current_device() const { return static_cast<int>(c10::cuda::current_device()); }

void CudaAccelerator::set_device(int index) {
  DS_CHECK(index >= 0 && index < device_count(), "set_device: cuda device index ", index,
           " out of range (", device_count(), " visible devices; check CUDA_VISIBLE_DEVICES)");
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}

void CudaAccelerator::synchronize(int index) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(resolve(index)));
  c10::cuda::device_synchronize();
}

MemoryStats CudaAccelerator::memory_stats(int index) const {
  int idx = resolve(index);
  MemoryStats stats;
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(idx));
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    stats.total_bytes = static_cast<int64_t>(total_bytes);
    stats.available_bytes = static_cast<int64_t>(free_bytes);
  }
  auto device_stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(idx));
  // Index 0 is the aggregate over all pool kinds in every LibTorch version we build against.
  stats.allocated_bytes = device_stats.allocated_bytes[0].current;
  stats.peak_allocated_bytes = device_stats.allocated_bytes[0].peak;
  return stats;
}

void CudaAccelerator::reset_peak_memory_stats(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(resolve(index)));
}

at::Tensor CudaAccelerator::pin_memory(const at::Tensor& t) const {
  return t.is_pinned() ? t : t.pin_memory();
}

bool CudaAccelerator::is_pinned(const at::Tensor& t) const { return t.is_pinned(); }

bool CudaAccelerator::is_bf16_supported() const {
  return at::cuda::getCurrentDeviceProperties()->major >= 8;
}

at::Generator CudaAccelerator::default_generator(int index) const {
  return at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(resolve(index)));
}

void CudaAccelerator::manual_seed(uint64_t seed) {
  for (int i = 0; i < device_count(); ++i) {
    auto gen = default_generator(i);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
}

at::Tensor CudaAccelerator::get_rng_state(int index) const {
  auto gen = default_generator(index);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return at::Tensor(gen.get_state());
}

void CudaAccelerator::set_rng_state(const at::Tensor& state, int index) {
  auto gen = default_generator(index);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace deepspeed::accelerator
