// Cutting and joining a tensor-parallel parameter (deepspeed/tp/partition.h). It lives in the checkpoint layer, which
// the checkpoint tools (ds_to_universal) link alone; the tp layers reach it through the library.
#include "deepspeed/tp/partition.h"

#include <ATen/ATen.h>

#include "deepspeed/error.h"

namespace deepspeed::tp {
namespace {

// `t` with dimension `dim` seen as [fused_parts, n / fused_parts].
at::Tensor as_blocks(const at::Tensor& t, int64_t dim, int64_t fused_parts) {
  return t.unflatten(dim, {fused_parts, t.size(dim) / fused_parts});
}

}  // namespace

at::Tensor slice_split(const at::Tensor& whole, int64_t dim, int64_t fused_parts, int64_t rank, int64_t size) {
  DS_CHECK(dim >= 0 && dim < whole.dim() && fused_parts >= 1 && size >= 1 && rank >= 0 && rank < size,
           "tensor parallelism: no slice ", rank, " of ", size, " in dimension ", dim, " of a ", whole.dim(),
           "-d tensor");
  DS_CHECK(whole.size(dim) % (fused_parts * size) == 0, "tensor parallelism: dimension ", dim, " (", whole.size(dim),
           ") does not split into ", fused_parts, " block(s) over ", size, " ranks");
  const at::Tensor blocks = as_blocks(whole, dim, fused_parts);
  const int64_t part = blocks.size(dim + 1) / size;
  return blocks.narrow(dim + 1, rank * part, part).flatten(dim, dim + 1).contiguous();
}

at::Tensor merge_split(const std::vector<at::Tensor>& slices, int64_t dim, int64_t fused_parts) {
  DS_CHECK(!slices.empty(), "tensor parallelism: no slices to join");
  std::vector<at::Tensor> blocks;
  for (const at::Tensor& s : slices) blocks.push_back(as_blocks(s, dim, fused_parts));
  return at::cat(blocks, dim + 1).flatten(dim, dim + 1);
}

}  // namespace deepspeed::tp
