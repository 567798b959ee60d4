#include "runtime/activation_checkpointing/contiguous_buffer.h"

#include <ATen/ATen.h>

#include <mutex>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::checkpointing {
namespace {

// Each stored tensor starts on a cache-line (and vector-load) boundary.
constexpr int64_t kAlignBytes = 64;

int64_t aligned(int64_t bytes) { return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

}  // namespace

struct ContiguousBuffer::Shared {
  std::mutex mutex;
  at::Tensor buffer;  // uint8, slots * slot_bytes
  int64_t slot_bytes = 0;
  std::vector<bool> in_use;
  bool pin = false;
};

namespace {

// Frees its slot when the last tensor stored in it goes away. Holds the buffer itself, so memory
// under live tensors survives a reallocation or a reset().
struct SlotLease {
  std::shared_ptr<ContiguousBuffer::Shared> shared;
  at::Tensor buffer;
  size_t slot = 0;
  bool taken = false;

  ~SlotLease() {
    if (!taken) return;
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->in_use[slot] = false;
  }
};

}  // namespace

ContiguousBuffer::ContiguousBuffer(c10::Device device, int slots, bool pin)
    : device_(device), shared_(std::make_shared<Shared>()) {
  DS_CHECK(slots >= 1, "activation_checkpointing.number_checkpoints: expected at least 1, got ",
           slots);
  shared_->in_use.assign(static_cast<size_t>(slots), false);
  shared_->pin = pin;
}

std::vector<at::Tensor> ContiguousBuffer::store(const std::vector<at::Tensor>& tensors) {
  int64_t needed = 0;
  for (const auto& t : tensors) needed += aligned(static_cast<int64_t>(t.nbytes()));

  auto lease = std::make_shared<SlotLease>();
  lease->shared = shared_;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    Shared& s = *shared_;
    size_t busy = 0;
    for (bool used : s.in_use) busy += used ? 1 : 0;
    DS_CHECK_T(
        ConfigError, busy < s.in_use.size(),
        "activation_checkpointing.number_checkpoints: ", busy + 1,
        " checkpointed segments would hold their inputs at once, but the contiguous buffer has ",
        s.in_use.size(),
        " slots; set number_checkpoints to at least the number of checkpoints taken in one "
        "forward pass");
    if (needed > s.slot_bytes) {
      DS_CHECK(busy == 0,
               "activation_checkpointing.contiguous_memory_optimization: a checkpoint saves ",
               needed, " bytes of inputs but the contiguous buffer's slots hold ", s.slot_bytes,
               " (sized by the first checkpoint); checkpointed segments live at the same time must "
               "take inputs of "
               "the same size");
      // Nothing lives in the old buffer: replace it by one sized for this segment.
      s.buffer = at::Tensor();
      s.slot_bytes = needed;
      const int64_t total = s.slot_bytes * static_cast<int64_t>(s.in_use.size());
      if (s.pin) {
        s.buffer = accelerator::get_accelerator().pin_memory(at::empty({total}, at::kByte));
      } else {
        s.buffer = at::empty({total}, at::TensorOptions().dtype(at::kByte).device(device_));
      }
    }
    size_t slot = 0;
    while (s.in_use[slot]) ++slot;
    s.in_use[slot] = true;
    lease->slot = slot;
    lease->taken = true;
    lease->buffer = s.buffer;
  }

  // Each stored tensor's deleter holds the lease; the last one to die frees the slot.
  auto* base = static_cast<uint8_t*>(lease->buffer.data_ptr()) +
               static_cast<int64_t>(lease->slot) * shared_->slot_bytes;
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  int64_t offset = 0;
  for (const auto& t : tensors) {
    at::Tensor dst = at::from_blob(
        base + offset, t.sizes(), [lease](void*) {},
        at::TensorOptions().dtype(t.scalar_type()).device(lease->buffer.device()));
    dst.copy_(t);
    out.push_back(dst);
    offset += aligned(static_cast<int64_t>(t.nbytes()));
  }
  return out;
}

int64_t ContiguousBuffer::capacity_bytes() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->buffer.defined() ? static_cast<int64_t>(shared_->buffer.nbytes()) : 0;
}

int64_t ContiguousBuffer::slots_in_use() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  int64_t busy = 0;
  for (bool used : shared_->in_use) busy += used ? 1 : 0;
  return busy;
}

}  // namespace deepspeed::checkpointing
