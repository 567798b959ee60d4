#include "zero/global_norm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace deepspeed::zero {

namespace {
// 64K elements: 512 KiB of doubles, cache-sized; the per-chunk dot product in double is exact to ~1e-16 relative
// per addition, so the chunk size does not show in the result.
constexpr int64_t kChunk = int64_t{1} << 16;
// On an accelerator each read of a sum is a device synchronization (64K-element chunks cost 0.6 s a step on a 1.3B
// model on an H200): there the chunks are 16M elements (a 128 MiB double copy at a time) and their dot products
// add up on the device, read once.
constexpr int64_t kDeviceChunk = int64_t{1} << 24;
}  // namespace

double squared_norm(const at::Tensor& t) {
  if (t.numel() == 0) return 0.0;
  const at::Tensor flat = t.reshape({-1});
  const int64_t n = flat.numel();
  if (!flat.device().is_cpu()) {
    at::Tensor sq = at::zeros({}, flat.options().dtype(at::kDouble));
    for (int64_t begin = 0; begin < n; begin += kDeviceChunk) {
      const at::Tensor chunk = flat.narrow(0, begin, std::min(kDeviceChunk, n - begin)).to(at::kDouble);
      sq.add_(at::dot(chunk, chunk));
    }
    return sq.item<double>();
  }
  double sq = 0.0;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const at::Tensor chunk = flat.narrow(0, begin, std::min(kChunk, n - begin)).to(at::kDouble);
    sq += at::dot(chunk, chunk).item<double>();
  }
  return sq;
}

double global_norm(const std::vector<at::Tensor>& grads, comm::ProcessGroup* group) {
  double sq = 0.0;
  for (const auto& g : grads) sq += squared_norm(g);
  if (group != nullptr && group->size() > 1) {
    at::Tensor t = at::tensor({sq}, at::kDouble);
    group->all_reduce(t, comm::ReduceOp::kSum);
    sq = t.item<double>();
  }
  return std::sqrt(sq);
}

}  // namespace deepspeed::zero
