// The CUDA accelerator, compiled only when LibTorch was built with CUDA (DS_WITH_CUDA). Memory statistics come from
// LibTorch's caching allocator (what this process holds) and the driver (what the device has left).
#pragma once

#include "deepspeed/accelerator.h"

namespace deepspeed::accelerator {

class CudaAccelerator final : public Accelerator {
 public:
  // True when the CUDA runtime sees at least one device.
  static bool is_available();

  std::string name() const override { return "cuda"; }
  c10::Device device(int index = -1) const override;
  int device_count() const override;
  int current_device() const override;
  void set_device(int index) override;
  void synchronize(int index = -1) override;

  MemoryStats memory_stats(int index = -1) const override;
  void reset_peak_memory_stats(int index = -1) override;

  bool pin_memory_supported() const override { return true; }
  at::Tensor pin_memory(const at::Tensor& t) const override;
  bool is_pinned(const at::Tensor& t) const override;
  at::Tensor empty_pinned(at::IntArrayRef sizes, at::ScalarType dtype) const override;

  std::unique_ptr<Stream> new_stream(int index = -1) const override;
  std::unique_ptr<Stream> current_stream(int index = -1) const override;
  std::unique_ptr<Stream> default_stream(int index = -1) const override;
  std::unique_ptr<Event> new_event(bool enable_timing = false) const override;
  void record_stream(const at::Tensor& t, const Stream& stream) const override;

  std::string communication_backend_name() const override { return "nccl"; }
  bool is_bf16_supported() const override;
  bool is_fp16_supported() const override { return true; }

  at::Generator default_generator(int index = -1) const override;
  void manual_seed(uint64_t seed) override;
  at::Tensor get_rng_state(int index = -1) const override;
  void set_rng_state(const at::Tensor& state, int index = -1) override;

 private:
  int resolve(int index) const { return index < 0 ? current_device() : index; }
};

}  // namespace deepspeed::accelerator
