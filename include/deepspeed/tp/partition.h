// How tensor parallelism cuts a parameter: rank r of T holds slice r of one dimension (of each of `fused_parts`
// equal blocks along it, in block order, for fused q/k/v). ATen only, for the layers and for checkpoints that join
// the tensor ranks' slices or cut them again at another size.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace deepspeed::tp {

// Slice `rank` of `size` of the whole tensor `whole` (a contiguous tensor; it may share `whole`'s storage).
at::Tensor slice_split(const at::Tensor& whole, int64_t dim, int64_t fused_parts, int64_t rank, int64_t size);
// The whole tensor from every rank's slice, in rank order.
at::Tensor merge_split(const std::vector<at::Tensor>& slices, int64_t dim, int64_t fused_parts);

}  // namespace deepspeed::tp
