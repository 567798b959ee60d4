// The CPU accelerator: host memory is the device memory, work is synchronous, and there is nothing to pin.
#pragma once

#include "deepspeed/accelerator.h"

namespace deepspeed::accelerator {

class CpuAccelerator final : public Accelerator {
 public:
  std::string name() const override { return "cpu"; }
  c10::Device device(int index = -1) const override;
  int device_count() const override { return 1; }
  int current_device() const override { return 0; }
  void set_device(int index) override;
  void synchronize(int index = -1) override {}

  MemoryStats memory_stats(int index = -1) const override;
  void reset_peak_memory_stats(int index = -1) override;

  bool pin_memory_supported() const override { return false; }
  at::Tensor pin_memory(const at::Tensor& t) const override { return t; }
  bool is_pinned(const at::Tensor& t) const override { return false; }
  at::Tensor empty_pinned(at::IntArrayRef sizes, at::ScalarType dtype) const override;

  std::unique_ptr<Stream> new_stream(int index = -1) const override;
  std::unique_ptr<Stream> current_stream(int index = -1) const override { return new_stream(index); }
  std::unique_ptr<Stream> default_stream(int index = -1) const override { return new_stream(index); }
  std::unique_ptr<Event> new_event(bool enable_timing = false) const override;
  void record_stream(const at::Tensor& t, const Stream& stream) const override {}

  std::string communication_backend_name() const override { return "gloo"; }
  bool is_bf16_supported() const override { return true; }
  bool is_fp16_supported() const override { return true; }

  at::Generator default_generator(int index = -1) const override;
  void manual_seed(uint64_t seed) override;
  at::Tensor get_rng_state(int index = -1) const override;
  void set_rng_state(const at::Tensor& state, int index = -1) override;
};

}  // namespace deepspeed::accelerator
