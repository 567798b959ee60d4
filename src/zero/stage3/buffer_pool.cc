#include "zero/stage3/buffer_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "deepspeed/error.h"

namespace deepspeed::zero {

at::Tensor BufferPool::acquire(at::ScalarType dtype, int64_t numel) {
  const int kind = static_cast<int>(dtype);
  at::Tensor base;
  // The smallest free buffer of this dtype that holds `numel`, if it is at most twice as large.
  auto it = free_.lower_bound({kind, numel});
  if (it != free_.end() && it->first.first == kind && it->first.second <= 2 * numel) {
    base = std::move(it->second.back());
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
  } else {
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
    free_idle_until(bytes);
    base = at::empty({numel}, at::TensorOptions().dtype(dtype).device(device_));
    ++allocations_;
    reserved_ += bytes;
  }
  in_use_ += static_cast<int64_t>(base.nbytes());
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  high_water_ = std::max(high_water_, in_use_);
  return base.numel() == numel ? base : base.narrow(0, 0, numel);
}

// Frees idle buffers, largest first, until a new allocation of `bytes_needed` keeps everything held within the
// keep limit (or within what will be in use, when that is more).
void BufferPool::free_idle_until(int64_t bytes_needed) {
  const int64_t limit = std::max(keep_limit(), in_use_ + bytes_needed);
  while (reserved_ + bytes_needed > limit && !free_.empty()) {
    auto largest = std::max_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
      return a.first.second * static_cast<int64_t>(c10::elementSize(static_cast<at::ScalarType>(a.first.first))) <
             b.first.second * static_cast<int64_t>(c10::elementSize(static_cast<at::ScalarType>(b.first.first)));
    });
    reserved_ -= static_cast<int64_t>(largest->second.back().nbytes());
    largest->second.pop_back();
    if (largest->second.empty()) free_.erase(largest);
  }
}

void BufferPool::release(at::Tensor buffer) {
  if (!buffer.defined()) return;
  DS_ASSERT(buffer.dim() == 1 && buffer.storage_offset() == 0, "BufferPool::release: not a pool buffer");
  // A request served from a larger buffer handed out its front: the whole allocation comes back.
  const int64_t item = static_cast<int64_t>(buffer.element_size());
  const int64_t base_numel = static_cast<int64_t>(buffer.storage().nbytes()) / item;
  at::Tensor base = buffer;
  if (base_numel != buffer.numel()) base = at::empty({0}, buffer.options()).set_(buffer.storage(), 0, {base_numel});
  buffer = at::Tensor();
  const int64_t bytes = base_numel * item;
  in_use_ -= bytes;
  if (reserved_ > keep_limit()) {
    reserved_ -= bytes;  // freed when `base` goes out of scope
    return;
  }
  free_[{static_cast<int>(base.scalar_type()), base_numel}].push_back(std::move(base));
}

}  // namespace deepspeed::zero
