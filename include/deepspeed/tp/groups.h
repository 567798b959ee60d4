// The process groups of tensor parallelism, as Megatron and DeepSpeed lay them out: ranks [k*T, (k+1)*T) hold the
// slices of one model replica (their frequent all-reduces stay on a node's fast links) and ranks r, r+T, r+2T, ...
// hold the same slice of every replica (the data-parallel peers that average its gradients and, with ZeRO, partition
// its optimizer state). The engine uses these groups for `tensor_parallel.autotp_size`; a model built with
// deepspeed::tp layers before initialize() builds them over the same group.
#pragma once

#include "deepspeed/comm.h"

namespace deepspeed::tp {

struct TensorParallelGroups {
  int tp_size = 1;
  comm::ProcessGroup tensor_parallel;  // this rank's T consecutive ranks (null at tp_size 1)
  comm::ProcessGroup data_parallel;    // the ranks holding this rank's slice (the world at tp_size 1)
};

// Made once per world and tp_size (collective the first time: every rank asks, in the same order). tp_size must
// divide the world size; the error names both.
TensorParallelGroups tensor_parallel_groups(int tp_size);

}  // namespace deepspeed::tp
