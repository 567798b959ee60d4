// The device contract (DeepSpeed's "accelerator"): everything in deepspeed-cpp that needs to know about devices
// asks the accelerator instead of testing for CUDA itself, so supporting a new device is one new implementation.
//
// Selection: the environment variable DS_ACCELERATOR ("cpu" or "cuda") wins; otherwise CUDA when this build has it
// and a device is visible, else CPU. get_accelerator() is thread-safe; the chosen instance lives for the process.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace deepspeed::accelerator {

// Memory as the device reports it. On CPU: the OS view (MemTotal/MemAvailable, this process's RSS and peak RSS).
struct MemoryStats {
  int64_t total_bytes = 0;      // capacity of the device
  int64_t available_bytes = 0;  // what could still be allocated
  int64_t allocated_bytes = 0;  // held by this process now
  int64_t peak_allocated_bytes = 0;
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;

  // "cpu" or "cuda": the name DeepSpeed uses for the accelerator kind.
  virtual std::string name() const = 0;
  // The device for `index` (-1 = the current device), e.g. cpu or cuda:1.
  virtual c10::Device device(int index = -1) const = 0;
  // device_name(1) == "cuda:1"; on CPU always "cpu".
  std::string device_name(int index = -1) const { return device(index).str(); }
  virtual int device_count() const = 0;
  virtual int current_device() const = 0;
  // Binds this process to a device; ranks call it with their LOCAL_RANK. Throws on an out-of-range index.
  virtual void set_device(int index) = 0;
  // Waits for all queued work on the device (a no-op on CPU, where work is synchronous).
  virtual void synchronize(int index = -1) = 0;

  virtual MemoryStats memory_stats(int index = -1) const = 0;
  // Forgets the peak so a later reading covers only what follows (on CPU: resets the kernel's peak RSS when allowed).
  virtual void reset_peak_memory_stats(int index = -1) = 0;

  // Page-locked host memory speeds host<->device copies; CPU-only builds have nothing to pin for.
  virtual bool pin_memory_supported() const = 0;
  // Returns `t` in pinned host memory where supported, else `t` itself.
  virtual at::Tensor pin_memory(const at::Tensor& t) const = 0;
  virtual bool is_pinned(const at::Tensor& t) const = 0;

  // The collective backend for this device: "gloo" on CPU, "nccl" on CUDA.
  virtual std::string communication_backend_name() const = 0;

  virtual bool is_bf16_supported() const = 0;
  virtual bool is_fp16_supported() const = 0;

  // The random generator of the device (used for seeding and for checkpointing RNG state).
  virtual at::Generator default_generator(int index = -1) const = 0;
  virtual void manual_seed(uint64_t seed) = 0;
  virtual at::Tensor get_rng_state(int index = -1) const = 0;
  virtual void set_rng_state(const at::Tensor& state, int index = -1) = 0;
};

// The process-wide accelerator (see the selection rules above). Throws deepspeed::Error when DS_ACCELERATOR names
// an accelerator this build does not have.
Accelerator& get_accelerator();

// Intra-op threads LibTorch should use for one of `local_world_size` ranks sharing this host's cores (respecting
// the process's CPU affinity). LibTorch defaults to 1 thread on Debian's build, so ranks must set it. At least 1.
int host_threads_per_rank(int local_world_size);

// Names of the accelerators compiled into this build ("cpu", and "cuda" in a CUDA build).
std::string available_accelerators();

}  // namespace deepspeed::accelerator
