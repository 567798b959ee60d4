// Tensor-parallel process groups (deepspeed/tp/groups.h) over the shared grid layout (comm/mesh.h).
#include "deepspeed/tp/groups.h"

#include "comm/mesh.h"

namespace deepspeed::tp {

TensorParallelGroups tensor_parallel_groups(int tp_size) {
  const comm::GridGroups grid = comm::grid_groups("tensor_parallel", "tensor_parallel.autotp_size", tp_size);
  TensorParallelGroups g;
  g.tp_size = tp_size;
  g.tensor_parallel = grid.inner;
  g.data_parallel = grid.outer;
  return g;
}

}  // namespace deepspeed::tp
