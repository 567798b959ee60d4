// aligned_empty(): host buffers that O_DIRECT can use without a bounce copy.
#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>

#include "deepspeed/accelerator.h"
#include "swap/aio.h"

namespace deepspeed::swap {

at::Tensor aligned_empty(int64_t numel, at::ScalarType dtype) {
  DS_CHECK_T(AioError, numel >= 0, "aligned_empty: numel must be >= 0, got ", numel);
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  // kAioAlignment is a multiple of every element size, so the padded storage holds a whole number
  // of elements.
  const int64_t bytes = std::max<int64_t>(padded_bytes(numel * item), kAioAlignment);
  const int64_t padded_numel = bytes / item;

  auto& acc = accelerator::get_accelerator();
  if (acc.pin_memory_supported()) {
    at::Tensor pinned = acc.pin_memory(at::empty({padded_numel}, at::TensorOptions().dtype(dtype)));
    if (reinterpret_cast<uintptr_t>(pinned.data_ptr()) % kAioAlignment == 0) {
      std::memset(static_cast<char*>(pinned.data_ptr()) + numel * item, 0,
                  static_cast<size_t>(bytes - numel * item));
      return pinned.narrow(0, 0, numel);
    }
  }
  void* p = nullptr;
  int rc = posix_memalign(&p, kAioAlignment, static_cast<size_t>(bytes));
  DS_CHECK_T(AioError, rc == 0 && p != nullptr, "aligned_empty: cannot allocate ", bytes,
             " bytes: ", std::strerror(rc));
  // Zero the padding so the tail block written to a swap file is deterministic.
  std::memset(static_cast<char*>(p) + numel * item, 0, static_cast<size_t>(bytes - numel * item));
  at::Tensor t = at::from_blob(
      p, {padded_numel}, [](void* q) { std::free(q); }, at::TensorOptions().dtype(dtype));
  return t.narrow(0, 0, numel);
}

}  // namespace deepspeed::swap
