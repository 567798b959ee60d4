// Freeing a buffer's memory at a moment we choose, not when its last tensor handle goes.
//
// A gathered unit must be gone before the next one is gathered, but handles we do not control keep its storage
// alive: autograd's saved tensors, and c10d's work objects, which the communication threads drop only some time
// after wait() has returned. Pointing the storage at nothing frees the memory now while every handle stays valid
// (empty) and can be re-pointed later.
#pragma once

#include <ATen/core/Tensor.h>

namespace deepspeed::zero {

inline void detach_storage(const at::Tensor& full) {
  c10::StorageImpl* st = full.storage().unsafeGetStorageImpl();
  st->set_data_ptr_noswap(c10::DataPtr(nullptr, full.device()));
  st->set_nbytes(0);
}

}  // namespace deepspeed::zero
