// contiguous_memory_optimization: saved checkpoint inputs live in one preallocated buffer per
// device instead of one allocation each, so a long forward does not fragment device memory with
// activations of varying lifetimes.
//
// The buffer has `slots` equal slots; one checkpointed segment takes one slot for all its saved
// tensors. The slot size is set by the first segment stored (DeepSpeed sizes its buffers the same
// way: every layer takes inputs of one shape). A stored tensor owns a lease on its slot: the slot
// is free again when the last tensor stored in it is destroyed (autograd drops saved tensors after
// backward), so no explicit bookkeeping call is needed.
//
// Thread-safety: store() and the accessors lock; leases may be released from any thread.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace deepspeed::checkpointing {

class ContiguousBuffer {
 public:
  // `pin`: allocate the buffer in pinned host memory through the accelerator (cpu_checkpointing on
  // a device).
  ContiguousBuffer(c10::Device device, int slots, bool pin);

  // Copies `tensors` (defined, any dtype, any device) into one free slot on this buffer's device
  // and returns the copies, contiguous and of the same shapes. Throws ConfigError naming
  // number_checkpoints when every slot is taken, and Error when the tensors need more bytes than a
  // slot holds while other slots are in use (with no slot in use the buffer is reallocated larger).
  std::vector<at::Tensor> store(const std::vector<at::Tensor>& tensors);

  int64_t capacity_bytes() const;
  int64_t slots_in_use() const;
  c10::Device device() const { return device_; }

  // The buffer and its slot table, shared with the leases of stored tensors (defined in the .cc).
  struct Shared;

 private:
  c10::Device device_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace deepspeed::checkpointing
