#include "zero/stage3/buffer_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "deepspeed/error.h"

namespace deepspeed::zero {

at::Tensor BufferPool::acquire(at::ScalarType dtype, int64_t numel) {
  at::Tensor t;
  auto it = free_.find({static_cast<int>(dtype), numel});
  if (it != free_.end() && !it->second.empty()) {
    t = std::move(it->second.back());
    it->second.pop_back();
  } else {
    t = at::empty({numel}, at::TensorOptions().dtype(dtype));
    ++allocations_;
    reserved_ += static_cast<int64_t>(t.nbytes());
  }
  in_use_ += static_cast<int64_t>(t.nbytes());
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return t;
}

void BufferPool::release(at::Tensor buffer) {
  if (!buffer.defined()) return;
  DS_ASSERT(buffer.dim() == 1, "BufferPool::release: not a pool buffer");
  const auto bytes = static_cast<int64_t>(buffer.nbytes());
  in_use_ -= bytes;
  if (reserved_ > cache_limit_) {
    reserved_ -= bytes;  // freed when `buffer` goes out of scope
    return;
  }
  free_[{static_cast<int>(buffer.scalar_type()), buffer.numel()}].push_back(std::move(buffer));
}

}  // namespace deepspeed::zero
