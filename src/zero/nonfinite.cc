#include "zero/nonfinite.h"

#include <ATen/ATen.h>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

// Scans raw IEEE bit patterns: an element is inf or NaN exactly when all exponent bits are set. The
// per-block OR over integer compares vectorizes (std::isfinite with an early exit does not), so the
// common all-finite case costs one streaming pass; only a block that holds a bad element is scanned
// again for its index.
template <typename Bits>
int64_t scan_exponent(const void* data, int64_t n, Bits exponent_mask) {
  const Bits* bits = static_cast<const Bits*>(data);
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = begin + kBlock < n ? begin + kBlock : n;
    unsigned bad = 0;
    for (int64_t i = begin; i < end; ++i) bad |= (bits[i] & exponent_mask) == exponent_mask;
    if (!bad) continue;
    for (int64_t i = begin; i < end; ++i) {
      if ((bits[i] & exponent_mask) == exponent_mask) return i;
    }
  }
  return -1;
}

}  // namespace

int64_t first_nonfinite(const at::Tensor& grads) {
  DS_CHECK(grads.defined(), "first_nonfinite: the gradient tensor is undefined");
  if (!at::isFloatingType(grads.scalar_type())) return -1;
  const int64_t n = grads.numel();
  if (n == 0) return -1;
  if (grads.device().is_cpu() && grads.is_contiguous()) {
    const void* data = grads.data_ptr();
    switch (grads.scalar_type()) {
      case at::kFloat:
        return scan_exponent<uint32_t>(data, n, 0x7f800000u);
      case at::kDouble:
        return scan_exponent<uint64_t>(data, n, 0x7ff0000000000000ull);
      case at::kHalf:
        return scan_exponent<uint16_t>(data, n, 0x7c00u);
      case at::kBFloat16:
        return scan_exponent<uint16_t>(data, n, 0x7f80u);
      default:
        break;
    }
  }
  // Strided or device tensors: one fused pass on the tensor's own device, then a single index
  // lookup only when something is wrong, so the usual all-finite case costs one host sync.
  const at::Tensor bad = grads.reshape({-1}).isfinite().logical_not();
  if (!bad.any().item<bool>()) return -1;
  return bad.nonzero()[0][0].item<int64_t>();
}

}  // namespace deepspeed::zero
