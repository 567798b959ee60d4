// How each collective runs on a backend: natively where the backend can, otherwise through a
// fallback built from the ops it has, with the finishing work in Pending::finalize (run at
// Work::wait). Arguments are validated by the caller (process_group.cc); ranks here are group
// ranks.
//
// Fallbacks and their cost (needed by Gloo in LibTorch 1.13; 2.x does all of these natively):
// - Data movement (broadcast, all-gather, all-to-all, send/recv) always travels as a uint8 view of
// the same
//   bytes, so every dtype moves, bfloat16 included. (Gloo rejects int16 and bool too, so an int16
//   view is no way out.) Free: a view, no copy.
// - AVG: SUM, then divide in finalize. bfloat16 (and other dtypes without native arithmetic):
// reduce an fp32
//   copy, copy back in finalize (one cast each way).
// - Non-contiguous tensors: a contiguous staging copy; outputs are copied back in finalize.
// - all_gather_into_tensor: Gloo's list all-gather into views of the output chunks (it copies its
// receive
//   buffer into them: one extra copy of the output).
// - reduce_scatter_tensor: all_to_all of the input (chunk j to rank j), then a local reduction of
// the n received
//   chunks (in fp32 for half types). Wire bytes (n-1)/n of the input, the same as a ring
//   reduce-scatter; costs a receive buffer the size of the input and one pass over it, not
//   pipelined with the transfer.
//
// Per-owner forms (BackendCapabilities::per_owner_partitioned, opt-in; for in-place calls whenever
// in_place_by_owner): all_gather_into_tensor as one broadcast per
// owner straight into its slice of the output (the own input copied in first, unless it is that slice already);
// reduce_scatter_tensor as one reduce per owner of its slice of a copy of the input (Gloo reduces in place and
// leaves partial sums in non-root buffers; the caller's input stays as it was), the own slice copied out at wait.
//
// Thread-safety: called from a group's issuing thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "comm/c10d_backend.h"
#include "comm/work_impl.h"

namespace deepspeed::comm::detail {

Pending run_all_reduce(Backend& b, const at::Tensor& t, ReduceOp op, int group_size);
Pending run_reduce(Backend& b, const at::Tensor& t, int root, bool is_root, ReduceOp op,
                   int group_size);
Pending run_broadcast(Backend& b, const at::Tensor& t, int root);
Pending run_all_gather_into_tensor(Backend& b, const at::Tensor& out, const at::Tensor& in, int rank,
                                   int group_size);
Pending run_all_gather(Backend& b, const std::vector<at::Tensor>& outs, const at::Tensor& in);
Pending run_reduce_scatter_tensor(Backend& b, const at::Tensor& out, const at::Tensor& in,
                                  ReduceOp op, int rank, int group_size);
// `buf` contiguous; chunk `rank` ends up holding the reduction, the others unspecified.
Pending run_reduce_scatter_in_place(Backend& b, const at::Tensor& buf, ReduceOp op, int rank, int group_size);
Pending run_all_to_all_single(Backend& b, const at::Tensor& out, const at::Tensor& in,
                              const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits);
Pending run_send(Backend& b, const at::Tensor& t, int dst, int tag);
Pending run_recv(Backend& b, const at::Tensor& t, int src, int tag);
Pending run_barrier(Backend& b);

}  // namespace deepspeed::comm::detail
