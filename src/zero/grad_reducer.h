// Data-parallel gradient reduction in buckets, overlapped with backward, for ZeRO stages 0, 1 and 2.
//
// Each flat group is cut into buckets of about `bucket_elems` elements: contiguous ranges taken from the end of the
// buffer, because backward produces the last layers' gradients first. A post-accumulation hook on every parameter's
// AccumulateGrad node moves the gradient where it belongs and counts its bucket down; when a bucket is complete (and
// overlap_comm is on) its collectives start asynchronously while autograd continues with earlier layers. Buckets
// are always launched in the same fixed order on every rank (a bucket waits for those before it), so ranks never
// issue collectives in different orders. finish_backward() launches what is left (unused parameters never fire
// their hook), waits, and applies DeepSpeed's averaging factors.
//
// Where gradients live (GradStorage):
//   kViews       stages 0/1, gradients accumulated in the model's dtype (fp32, or bf16/fp16 with grad_accum_dtype):
//                .grad are views of the group's grads_flat; autograd accumulates in place.
//   kAccumulate  bf16/fp16 model, stages 0/1, accumulating in fp32: the hook adds .grad into grads_flat and frees it.
//   kPartitioned stage 2: the hook adds .grad into a pooled staging buffer for its bucket and frees it; every pass is
//                reduced, and this rank keeps only its partition, accumulated across micro-steps in
//                `partition_dtype` (fp32, or the model's with grad_accum_dtype; the staging stays fp32). Full
//                buckets are reduced from the hooks even without overlap_comm (then synchronously), so staging
//                holds a few buckets, never the whole gradient. The buckets are sized from the model: a
//                reduce_bucket_size beyond what the staging may hold (this rank's share of the gradients over the
//                live staging buffers; DeepSpeed's default of 5e8 elements is a whole copy of a model's gradients
//                below 500M parameters) is cut to it, the config keeping its value (bucket_elems() says what was
//                used).
// How a bucket is reduced (Reduction): kAllReduce (stage 0, or reduce_scatter=false) or kReduceToOwner, where each
// rank's partition of the bucket is reduced to that rank only.
//
// Not thread-safe beyond autograd's own use: hooks run on the autograd thread while backward() blocks the caller.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "zero/flat_params.h"

namespace deepspeed::zero {

enum class GradStorage { kViews, kAccumulate, kPartitioned };
enum class Reduction { kAllReduce, kReduceToOwner };

struct GradReducerOptions {
  int64_t bucket_elems = 500000000;  // DeepSpeed's reduce_bucket_size default (elements)
  bool overlap_comm = true;          // start bucket reductions from the hooks
  bool average = true;               // gradient_allreduce_op "mean"; false ("sum"): no division at all
  bool prescale_gradients = false;   // divide by the world size before reducing instead of after
  double gradient_predivide_factor = 1.0;
  GradStorage storage = GradStorage::kViews;
  Reduction reduction = Reduction::kAllReduce;
  // The dtype gradients travel in (communication_data_type). Buckets accumulate in fp32 whatever it is; another
  // type casts a bucket into a wire buffer of that type (bucket-sized, dropped when the bucket completes), scales
  // and reduces it there as DeepSpeed does, and copies the result back.
  at::ScalarType comm_dtype = at::kFloat;
  at::ScalarType partition_dtype = at::kFloat;  // kPartitioned: the dtype this rank's partition accumulates in
  // Told, in a pass begun with reduce = true, as each bucket's reduction completes (kPartitioned: from the hooks,
  // while backward runs; the other storages complete in finish_backward): elements [begin, begin +
  // final_grads.numel()) of this rank's partition of group g now hold their final averaged gradient, `final_grads`
  // (a view of partition_grads(g), written again only after zero_grads). Runs under the reducer's lock on the
  // autograd thread, after the reduction's work was queued on the current stream. ZeRO-Offload copies them to host
  // memory here, while backward goes on with earlier layers.
  std::function<void(size_t g, int64_t begin, const at::Tensor& final_grads)> on_partition_final;
};

class GradReducer {
 public:
  // Registers hooks on every parameter of `groups` (whose buffers must outlive the reducer).
  GradReducer(std::vector<FlatGroup>& groups, comm::ProcessGroup group, GradReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Arms the hooks for one backward pass. `reduce`: this pass ends a gradient-accumulation window (stages 0/1
  // reduce only then; stage 2 reduces every pass regardless).
  void begin_backward(bool reduce);
  // Launches the buckets not yet launched, waits for all, applies the averaging factor.
  void finish_backward();

  // This rank's averaged gradients for its partition of group `g` (valid after a reducing pass; fp32 unless they
  // accumulate in the model's dtype): a view of grads_flat at stages 0/1, the accumulated partition at stage 2.
  at::Tensor partition_grads(size_t g) const;
  // Clears stage 2's partition buffers (stages 0/1 clear grads_flat through zero_grads).
  void zero_partition_grads();

  size_t num_buckets() const;
  // The bucket size used (elements): bucket_elems of the options, or less at stage 2 (see kPartitioned above).
  int64_t bucket_elems() const;
  // Stage 2's bucket size for `total_elems` gradients partitioned over `world` ranks when `configured` is asked: at
  // most this rank's share over the live staging buffers, so that staging never holds more than the partition it
  // feeds; never below a floor that keeps small models' buckets from multiplying collectives, nor below a sixteenth
  // of the whole gradient over the live buffers (on many ranks the share is too small a bucket), nor above
  // `configured`.
  static int64_t sized_bucket_elems(int64_t configured, int64_t total_elems, int world);
  // Wall time (ms, cumulative) backward spent in the reduction rather than in autograd: launching buckets
  // (pre-scaling), waiting for them and post-scaling, from the hooks and in finish_backward().
  double blocked_ms() const;
  // Buckets whose reduction was started from a hook during the last backward (for tests of overlap).
  size_t buckets_launched_during_backward() const;
  // Bytes held in stage 2's staging pool and in wire buffers of buckets in flight right now (memory accounting).
  int64_t staging_bytes() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace deepspeed::zero
