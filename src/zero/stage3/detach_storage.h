// Freeing a buffer's memory at a moment we choose, not when its last tensor handle goes.
//
// A gathered unit must be gone before the next one is gathered, but handles we do not own keep its storage alive:
// autograd's saved tensors, and c10d's work objects, which Gloo's worker threads drop only some time after wait()
// has returned. Two tools:
// - detach_storage points the storage at nothing: the memory is freed now while every handle stays valid (empty)
//   and can be re-pointed later. Only for buffers no user code can still be reading (stage 3's pool buffers).
// - wait_for_release waits (briefly) until the communication threads have dropped their references, so that
//   releasing our own handles frees the memory at once, while a caller's own views keep it alive as they should.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstddef>
#include <thread>

namespace deepspeed::zero {

inline void detach_storage(const at::Tensor& full) {
  c10::StorageImpl* st = full.storage().unsafeGetStorageImpl();
  st->set_data_ptr_noswap(c10::DataPtr(nullptr, full.device()));
  st->set_nbytes(0);
}

// Waits until at most `expected` handles share `t`'s storage (the count before a collective was issued on it, less
// the handles released since), or `limit` has passed (then the memory is freed late, as without this wait).
inline void wait_for_release(const at::Tensor& t, size_t expected,
                             std::chrono::milliseconds limit = std::chrono::milliseconds(200)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (t.storage().use_count() > expected && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
}

}  // namespace deepspeed::zero
