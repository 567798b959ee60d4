#include "runtime/offload_states.h"

#include <ATen/ATen.h>

#include <unordered_set>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

// The whole storage of `t` as a flat byte tensor (views cover only part of it; the storage moves as a whole).
at::Tensor storage_bytes(const at::Tensor& t) {
  return at::empty({0}, t.options().dtype(at::kByte))
      .set_(t.storage(), /*storage_offset=*/0, {static_cast<int64_t>(t.storage().nbytes())}, {1});
}

}  // namespace

void StateOffloader::offload(const std::vector<at::Tensor>& tensors, bool pin_memory, c10::Device device) {
  DS_CHECK(entries_.empty(), "offload_states: states are already offloaded; call reload_states() first");
  auto& acc = accelerator::get_accelerator();
  std::unordered_set<const void*> seen;
  for (const auto& t : tensors) {
    if (!t.defined() || t.storage().nbytes() == 0 || t.device() != device) continue;
    if (!seen.insert(t.storage().unsafeGetStorageImpl()).second) continue;
    Entry e;
    e.device = t.device();
    at::Tensor bytes = storage_bytes(t);
    e.host = pin_memory && !device.is_cpu() ? acc.empty_pinned(bytes.sizes(), at::kByte)
                                            : at::empty(bytes.sizes(), bytes.options().device(at::kCPU));
    e.host.copy_(bytes);
    e.handle = bytes;
    // Re-pointing frees the original allocation (the storage's previous DataPtr is dropped).
    c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
    st->set_data_ptr_noswap(c10::DataPtr(e.host.data_ptr(), e.host.device()));
    entries_.push_back(std::move(e));
  }
}

void StateOffloader::reload() {
  for (auto& e : entries_) {
    // Fresh memory on the original device, owned by the storage again.
    at::Tensor fresh = e.host.to(e.device, /*non_blocking=*/false, /*copy=*/true);
    c10::StorageImpl* st = e.handle.storage().unsafeGetStorageImpl();
    at::DataPtr owned = std::move(fresh.storage().unsafeGetStorageImpl()->mutable_data_ptr());
    fresh.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(nullptr, e.device));
    fresh.storage().unsafeGetStorageImpl()->set_nbytes(0);
    st->set_data_ptr_noswap(std::move(owned));
  }
  entries_.clear();
}

int64_t StateOffloader::offloaded_bytes() const {
  int64_t bytes = 0;
  for (const auto& e : entries_) bytes += static_cast<int64_t>(e.host.nbytes());
  return bytes;
}

}  // namespace deepspeed::runtime
