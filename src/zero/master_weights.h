// The fp32 master weights the optimizer updates, and the way back to the model's parameters.
//
// Stage 0 with an fp32 model: the master of a group is its flat parameter buffer itself. Stages 1 and 2: each rank's
// master is its partition of the buffer (a view when the model is fp32 or, with bf16_master_weights_and_grads, when
// the masters are to stay bf16; an fp32 copy when the model runs in bf16/fp16 otherwise), and
// publish() all-gathers the updated partitions into every rank's full parameters, in chunks of at most
// `allgather_bucket_elems` (DeepSpeed's allgather_bucket_size) or by one broadcast per owner when
// allgather_partitions is false. Norms and overflow checks over partitioned gradients are combined across ranks, so
// every rank takes the same decision.
//
// ZeRO-Offload (offload_optimizer.device "cpu"): masters are always separate fp32 copies in host memory (pinned when
// the accelerator has pinned memory), gradients are copied into a host buffer before the step, and the CPU kernels
// update them there; publish() copies the result back to the device. On a CPU-only build host and device are the
// same memory, but the same copies run, so the path a GPU build takes is the one tested here.
//
// Fused copy-back (offload with a bf16/fp16 model, after fuse_copy_back): the CPU kernel writes the rounded masters
// straight into this rank's partition of the parameter buffer in the same pass as the update (DeepSpeed's
// fp16_param), and publish() only all-gathers it. When the parameters are not in host memory (a GPU build) the
// kernel writes a host buffer in the model's dtype and publish() copies that: half the bytes of the fp32 master.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/comm.h"
#include "zero/flat_params.h"
#include "zero/grad_copy_down.h"
#include "accelerator/host_read_fence.h"

namespace deepspeed::zero {

struct MasterWeightsOptions {
  bool partitioned = false;  // stages 1 and 2
  int64_t allgather_bucket_elems = 500000000;
  bool allgather_partitions = true;
  bool offload_to_host = false;  // offload_optimizer.device == "cpu"
  bool pin_memory = false;       // offload_optimizer.pin_memory
  bool external_masters = false; // offload_optimizer "nvme": masters live in swap files, written back by slice
  // bf16.bf16_master_weights_and_grads: the masters are the model's own bf16 partition (views, as with an fp32
  // model; with offload, bf16 host copies beside bf16 host gradients), not fp32 copies; the optimizer's fp32
  // arithmetic rounds each update back into them.
  bool model_dtype_masters = false;
  // With offload_to_host: each partition's final gradient may arrive during backward (copy_final_grads), not all at
  // stage_grads. Off where a step reads the host gradients while the next backward runs (overlap_step, ZenFlow).
  bool early_host_grads = false;
};

class MasterWeights {
 public:
  MasterWeights(std::vector<FlatGroup>& groups, comm::ProcessGroup world, MasterWeightsOptions options);
  ~MasterWeights();

  // Master weights, one per group (whole buffer or this rank's partition): fp32, or the model's bf16 with
  // model_dtype_masters.
  // Waits first for the copies up that publish() may still run from them (pinned host memory, a GPU): every writer of
  // the masters, and of the fused copy-back buffers the optimizer fills in the same step, asks for them here.
  const std::vector<at::Tensor>& masters() const {
    host_reads_.wait();
    return masters_;
  }
  // Bytes of master weights that are copies (0 when the masters are views of fp32 parameters).
  int64_t copy_bytes() const;
  // Bytes the offload keeps in host memory for gradients (0 without offload).
  int64_t host_grad_bytes() const;
  bool offloaded() const { return options_.offload_to_host; }

  // The gradients the optimizer should read: `grads` itself, or (offload) their copies in host memory, where what
  // copy_final_grads did not bring is copied now.
  std::vector<at::Tensor> stage_grads(const std::vector<at::Tensor>& grads);
  // early_host_grads: elements [begin, begin + final_grads.numel()) of this rank's gradients of group g are final;
  // copies them into their host copy now. From a device that is a copy on a stream of its own into pinned memory,
  // which does not block the host (stage_grads waits for it); into pageable memory it would, so those wait for
  // stage_grads. `final_grads` must not be written before stage_grads or forget_final_grads.
  void copy_final_grads(size_t g, int64_t begin, const at::Tensor& final_grads);
  // The gradients were cleared before a step read them: nothing copied so far counts.
  void forget_final_grads();
  // Blocks until the copies copy_final_grads issued have read the gradients (before they are moved or freed).
  void wait_final_grads() const { grad_copies_.wait(); }
  // Gradient elements copy_final_grads copied (cumulative).
  int64_t final_grad_copies() const { return final_grad_copies_; }

  // L2 norm over every group's gradients `grads` (matching masters()), combined across ranks when partitioned or
  // when groups live on different ranks (FlatGroup::group).
  double global_norm(const std::vector<at::Tensor>& grads) const;
  // The name index of the first parameter (in group order) whose gradient holds inf/NaN on any rank, or nullopt.
  // Collective when partitioned: every rank must call it.
  std::optional<std::pair<size_t, size_t>> first_overflow(const std::vector<at::Tensor>& grads) const;
  // Copies the updated masters into the model's parameters on every rank. Collective when partitioned.
  void publish();
  // After masters() were overwritten (a loaded checkpoint): the same as publish(), but always rounding the masters
  // themselves into the parameters (a fused copy-back target holds the previous step's values). Collective.
  void restore_params();
  // Where each parameter's elements sit in masters() (for checkpoints).
  std::vector<zero::MasterFragment> master_fragments() const;
  // With offload and a bf16/fp16 model, offers the optimizer the parameters to write itself in its step (see
  // above): `accept(targets)` returns whether it will. Call once, after building the optimizer over masters().
  bool fuse_copy_back(const std::function<bool(const std::vector<at::Tensor>&)>& accept);
  bool copy_back_fused() const { return !copy_back_.empty(); }
  // With external masters: this rank's updated master values for elements [offset, offset + master.numel()) of
  // group g's partition, copied into the parameters before publish() gathers them.
  void write_slice(size_t group, int64_t offset, const at::Tensor& master);
  // The parameters' slice [offset, offset + n) of this rank's partition of group g when an optimizer kernel can
  // write it in its pass (bf16/fp16 in host memory); undefined otherwise (then call write_slice).
  at::Tensor copy_back_slice(size_t group, int64_t offset, int64_t n) const;
  // This rank's slice of group g's parameters as fp32 (the initial masters for a swapper).
  at::Tensor initial_master(size_t group) const;

 private:
  void publish_impl(bool from_masters);
  // Whether some group's copies live on fewer ranks than world_ (MoE experts): norms and overflow checks then
  // combine over world_ even when nothing is partitioned.
  bool has_narrow_groups() const;

  std::vector<FlatGroup>& groups_;
  mutable comm::ProcessGroup world_;  // collectives are non-const; the handle's identity never changes
  MasterWeightsOptions options_;
  std::vector<at::Tensor> masters_;
  std::vector<at::Tensor> host_grads_;  // offload only
  std::vector<at::Tensor> copy_back_;   // fused copy-back targets, one per group; empty when not fused
  bool copies_ = false;
  bool narrow_groups_ = false;
  // Recorded after publish() copied pinned host buffers up without blocking.
  accelerator::HostReadFence host_reads_;
  // early_host_grads: the copies, per group the [begin, end) ranges of host_grads_ they wrote since the last
  // stage_grads, and the count behind final_grad_copies().
  GradCopyDown grad_copies_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> final_ranges_;
  int64_t final_grad_copies_ = 0;
};

}  // namespace deepspeed::zero
