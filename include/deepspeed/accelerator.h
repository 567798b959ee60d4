// The device contract (DeepSpeed's "accelerator"): everything in deepspeed-cpp that needs to know about devices
// asks the accelerator instead of testing for CUDA itself, so supporting a new device is one new implementation.
//
// Selection: the environment variable DS_ACCELERATOR ("cpu" or "cuda") wins; otherwise CUDA when this build has it
// and a device is visible, else CPU. get_accelerator() is thread-safe; the chosen instance lives for the process.
//
// Streams and events are DeepSpeed's overlap tools (a side stream for gradient reduction, a prefetch stream for
// ZeRO-3 gathers, an event fence before a buffer is reused, device-side timing). On CPU work runs when it is
// issued: every stream is already finished, waits return at once, and a timing event reads the host's clock, so
// code written against the contract runs unchanged on both.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>

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
  // What the allocator holds, in use or cached (CUDA's caching allocator; on CPU the RSS again, as DeepSpeed's CPU
  // accelerator reports it), and its peak.
  int64_t reserved_bytes = 0;
  int64_t peak_reserved_bytes = 0;
};

// This host's memory whatever the accelerator: MemTotal/MemAvailable and this process's RSS and peak RSS (VmHWM).
MemoryStats host_memory_stats();

class Event;

// An ordered queue of device work (DeepSpeed's get_accelerator().Stream). Work issued while a stream is current
// (StreamGuard) runs in issue order on it; work on different streams may overlap.
class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks the host until everything issued to this stream so far has finished.
  virtual void synchronize() const = 0;
  // True when everything issued so far has finished; never blocks.
  virtual bool query() const = 0;
  // Work issued to this stream after the call starts only once `event` has completed; the host does not wait.
  virtual void wait_event(const Event& event) const = 0;
  // This stream waits for everything `other` has been given so far (an event recorded on `other` now).
  void wait_stream(const Stream& other) const;
  // LibTorch's handle (for c10 APIs and guards).
  virtual c10::Stream native() const = 0;
};

// A marker in a stream's queue (DeepSpeed's get_accelerator().Event): it completes when the work issued before
// record() has. Timing events measure the device's time between two markers; on CPU, the host's clock at record().
class Event {
 public:
  virtual ~Event() = default;
  // Records on `stream`, or on the current stream of the current device when null. May be recorded again.
  virtual void record(const Stream* stream = nullptr) = 0;
  // False before the first record() and while the recorded work runs.
  virtual bool query() const = 0;
  // Blocks the host until the recorded work has finished (returns at once when never recorded).
  virtual void synchronize() const = 0;
  // Milliseconds from this event to `end`; both recorded and made with timing (else deepspeed::Error). Waits for
  // `end` to complete first.
  virtual double elapsed_ms(const Event& end) const = 0;
};

// Makes `stream` (and its device) current on this thread until destroyed; the previous ones come back then.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream) : guard_(stream.native()) {}

 private:
  c10::StreamGuard guard_;
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
  // Uninitialised host memory, page-locked where pinning is supported: allocated pinned, without the copy that
  // pin_memory of an existing tensor makes.
  virtual at::Tensor empty_pinned(at::IntArrayRef sizes, at::ScalarType dtype) const = 0;

  // Streams of `index`'s device (-1: the current device). new_stream hands out one of LibTorch's pooled side streams
  // (reused round-robin, never destroyed), as torch.cuda.Stream() does under DeepSpeed's accelerator.
  virtual std::unique_ptr<Stream> new_stream(int index = -1) const = 0;
  virtual std::unique_ptr<Stream> current_stream(int index = -1) const = 0;
  virtual std::unique_ptr<Stream> default_stream(int index = -1) const = 0;
  virtual std::unique_ptr<Event> new_event(bool enable_timing = false) const = 0;
  // Tells the caching allocator that `t` is used by work on `stream`, so its memory is not handed out again before
  // that work completes (torch's Tensor.record_stream). A no-op on CPU.
  virtual void record_stream(const at::Tensor& t, const Stream& stream) const = 0;

  // DeepSpeed's names for the memory counters (bytes held now, and the peak since the last reset).
  int64_t memory_allocated(int index = -1) const { return memory_stats(index).allocated_bytes; }
  int64_t max_memory_allocated(int index = -1) const { return memory_stats(index).peak_allocated_bytes; }

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

// The device index a rank binds: its LOCAL_RANK. Ranks beyond the visible devices are an error naming both numbers,
// unless `share_devices` (DS_SHARE_DEVICES=1), which deals them out round-robin: several ranks on one GPU, as in
// a single-GPU test of a multi-rank job. Pure, so its rules are tested on any machine.
int device_for_local_rank(int local_rank, int device_count, bool share_devices);

// Binds this process to the device for `local_rank` (device_for_local_rank, DS_SHARE_DEVICES from the
// environment). init_distributed calls it before any group is made: NCCL communicators belong to a device.
void bind_local_device(int local_rank);

// Names of the accelerators compiled into this build ("cpu", and "cuda" in a CUDA build).
std::string available_accelerators();

}  // namespace deepspeed::accelerator
