#include "accelerator/cuda_accelerator.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "deepspeed/error.h"

namespace deepspeed::accelerator {
namespace {

class CudaStreamHandle final : public Stream {
 public:
  explicit CudaStreamHandle(c10::cuda::CUDAStream stream) : stream_(stream) {}
  void synchronize() const override { stream_.synchronize(); }
  bool query() const override { return stream_.query(); }
  void wait_event(const Event& event) const override;
  c10::Stream native() const override { return stream_.unwrap(); }
  const c10::cuda::CUDAStream& cuda() const { return stream_; }

 private:
  c10::cuda::CUDAStream stream_;
};

class CudaEventHandle final : public Event {
 public:
  explicit CudaEventHandle(bool timing)
      : timing_(timing), event_(timing ? cudaEventDefault : cudaEventDisableTiming) {}

  void record(const Stream* stream) override {
    if (stream == nullptr) {
      event_.record(c10::cuda::getCurrentCUDAStream());
    } else {
      event_.record(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream->native()));
    }
  }
  bool query() const override { return event_.isCreated() && event_.query(); }
  void synchronize() const override { event_.synchronize(); }
  double elapsed_ms(const Event& end) const override {
    const auto* other = dynamic_cast<const CudaEventHandle*>(&end);
    DS_CHECK(other != nullptr, "elapsed_ms: the end event belongs to another accelerator");
    DS_CHECK(timing_ && other->timing_, "elapsed_ms: both events must be made with enable_timing");
    DS_CHECK(event_.isCreated() && other->event_.isCreated(), "elapsed_ms: both events must be recorded first");
    other->event_.synchronize();
    return static_cast<double>(event_.elapsed_time(other->event_));
  }
  // The stream waits for this event (a no-op before the first record, as torch's Event.wait).
  void block(const c10::cuda::CUDAStream& stream) const { event_.block(stream); }

 private:
  bool timing_;
  mutable c10::cuda::CUDAEvent event_;  // block() is non-const in c10, but waiting on it changes nothing
};

void CudaStreamHandle::wait_event(const Event& event) const {
  const auto* e = dynamic_cast<const CudaEventHandle*>(&event);
  DS_CHECK(e != nullptr, "wait_event: the event belongs to another accelerator");
  e->block(stream_);
}

// LibTorch starts CUDA (and its caching allocator) at the first CUDA tensor: the allocator's statistics before
// then are an error ("Invalid device argument 0: did you call init?"), which ds_report met first.
void ensure_cuda_initialized() { at::globalContext().lazyInitDevice(c10::kCUDA); }

}  // namespace

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
  ensure_cuda_initialized();
  auto device_stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(idx));
  // Index 0 is the aggregate over all pool kinds in every LibTorch version we build against.
  stats.allocated_bytes = device_stats.allocated_bytes[0].current;
  stats.peak_allocated_bytes = device_stats.allocated_bytes[0].peak;
  stats.reserved_bytes = device_stats.reserved_bytes[0].current;
  stats.peak_reserved_bytes = device_stats.reserved_bytes[0].peak;
  return stats;
}

void CudaAccelerator::reset_peak_memory_stats(int index) {
  ensure_cuda_initialized();
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(resolve(index)));
}

at::Tensor CudaAccelerator::pin_memory(const at::Tensor& t) const {
  return t.is_pinned() ? t : t.pin_memory();
}

bool CudaAccelerator::is_pinned(const at::Tensor& t) const { return t.is_pinned(); }

at::Tensor CudaAccelerator::empty_pinned(at::IntArrayRef sizes, at::ScalarType dtype) const {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(at::kCPU).pinned_memory(true));
}

std::unique_ptr<Stream> CudaAccelerator::new_stream(int index) const {
  return std::make_unique<CudaStreamHandle>(
      c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(resolve(index))));
}

std::unique_ptr<Stream> CudaAccelerator::current_stream(int index) const {
  return std::make_unique<CudaStreamHandle>(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(resolve(index))));
}

std::unique_ptr<Stream> CudaAccelerator::default_stream(int index) const {
  return std::make_unique<CudaStreamHandle>(c10::cuda::getDefaultCUDAStream(static_cast<c10::DeviceIndex>(resolve(index))));
}

std::unique_ptr<Event> CudaAccelerator::new_event(bool enable_timing) const {
  return std::make_unique<CudaEventHandle>(enable_timing);
}

void CudaAccelerator::record_stream(const at::Tensor& t, const Stream& stream) const {
  if (!t.defined() || !t.is_cuda()) return;
  c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream.native()));
}

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
