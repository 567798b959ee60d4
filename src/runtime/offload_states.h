// Engine::offload_states / reload_states (DeepSpeed's engine.offload_states): moves chosen model states out of
// accelerator memory into host memory and back, e.g. to free the device between training phases (RLHF generation).
//
// The mechanism is storage re-pointing, as stage 3 uses for gathers: each distinct storage behind the chosen tensors
// gets a host copy (pinned when asked and available) and its StorageImpl is pointed at it, releasing the device
// memory; every view of it (parameters into flat buffers, partitions, optimizer state) follows without its holder
// knowing. reload() copies back into fresh device memory. On a CPU-only build host and device are the same memory,
// but the same copies and swaps run, so the path a GPU build takes is the one tested here. While offloaded, the
// engine refuses to run (the device tensors must not be touched).
//
// Only storages on the engine's device move: on an accelerator, states already in host memory (offload_optimizer's
// pinned masters and gradient copies, offload_param's pinned shards) stay where and as they are, pinned, instead of
// coming back pageable from a pointless host-to-host round trip. A moved storage's host copy is pinned when asked
// (one copy, into pinned memory allocated for it).
//
// Not thread-safe; driven by the engine's thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace deepspeed::runtime {

class StateOffloader {
 public:
  // Moves the storages behind `tensors` (deduplicated) that live on `device` to host memory. Throws if already
  // offloaded.
  void offload(const std::vector<at::Tensor>& tensors, bool pin_memory, c10::Device device);
  // Moves them back to fresh memory on their original device. No-op when nothing is offloaded.
  void reload();
  bool offloaded() const { return !entries_.empty(); }
  int64_t offloaded_bytes() const;

 private:
  struct Entry {
    at::Tensor handle;  // a tensor sharing the storage, keeps the StorageImpl alive
    at::Tensor host;    // the host copy the storage points at while offloaded
    c10::Device device = c10::kCPU;
  };
  std::vector<Entry> entries_;
};

}  // namespace deepspeed::runtime
