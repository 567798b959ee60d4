// ZeRO stage 3: partitioned parameters, gathered just in time per unit (include/deepspeed/zero.h), with their
// gradients reduce-scattered to the owning rank and the optimizer's fp32 masters kept only for this rank's partition.
//
// Layout. Every (unit, parameter group) pair is one flat buffer in the model's dtype, padded so each rank owns one
// equal aligned partition. This rank's partitions of all flats of group g sit back to back in one buffer per group:
// the fp32 masters (which are the stored parameters themselves when the model is fp32), a low-precision copy
// (bf16/fp16 models) and the fp32 gradient accumulator. The optimizer, clipping and overflow checks therefore see one
// flat tensor per group, as at stages 1 and 2.
//
// Gather/release. A flat's full buffer `full` is allocated once; between uses its storage points at nothing. A
// gather takes a buffer from the pool (buffer_pool.h), points the storage at it and all-gathers the partitions into
// it; the parameters are views of `full`. Because tensors autograd saved during forward (e.g. Linear's transposed
// weight) share that storage, re-pointing it before backward makes them read the re-gathered values, and releasing
// really frees memory: no ZeRO-specific layer is needed.
//
// Schedule. Units are fetched in pre_forward (forward) and in the backward of an identity autograd Function applied
// to the unit's output (before its gradients are computed). Parameter gradients accumulate into a pooled buffer of
// views; when every parameter of a unit has its gradient (AccumulateGrad post-hooks) the unit's flats are
// reduce-scattered asynchronously into the fp32 accumulators and the unit is released. The root unit (parameters
// outside any unit) is gathered from begin_forward to the end of backward; small parameters
// (stage3_param_persistence_threshold) live in a persistent unit that is always gathered and re-gathered after each
// optimizer step. The prefetch coordinator (prefetch_coordinator.h) replays the first step's fetch order.
//
// Thread-safety: the training thread drives it; during backward the autograd thread runs the hooks while the
// training thread is blocked in backward(), so no two threads touch it at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "swap/aio.h"
#include "deepspeed/zero.h"
#include "zero/grad_accumulator_ref.h"
#include "zero/grad_copy_down.h"
#include "accelerator/host_read_fence.h"
#include "swap/staging_ring.h"
#include "swap/swap_file.h"
#include "zero/partition.h"
#include "zero/stage3/buffer_pool.h"
#include "zero/stage3/prefetch_coordinator.h"
#include "zero/stage_features.h"
#include "zero/stage.h"
#include "zero/wall_clock.h"

namespace deepspeed::zero {

struct Stage3Options {
  // Where the model computes (the accelerator's device): gathered units, gradient partitions, model-dtype shards,
  // and the fp32 masters unless offloaded to host memory.
  c10::Device device = c10::Device(c10::kCPU);
  // What the model computes, reduces and accumulates in (FSDP2's MixedPrecisionPolicy).
  struct Precision {
    at::ScalarType dtype = at::kFloat;  // the model's compute dtype
    // communication_data_type: the dtype of each flat's reduce-scatter. The model's dtype reduces in place on the
    // gradient buffer; another takes a pooled buffer of that type. Each rank's partition accumulates in grad_dtype.
    at::ScalarType comm_dtype = at::kFloat;
    // The dtype this rank's gradient partitions accumulate in over micro-steps (data_types.grad_accum_dtype): fp32, or
    // the model's 16-bit dtype (half the bytes; each micro-step's reduced gradient rounded into the sum).
    at::ScalarType grad_dtype = at::kFloat;
    // bf16.bf16_master_weights_and_grads: the masters are in the model's dtype; without offload they are the shards
    // themselves (as an fp32 model's are), with offload_optimizer "cpu" host copies in that dtype.
    bool model_dtype_masters = false;
  } precision;
  // Which units are gathered ahead of use and kept (stage3_prefetch_bucket_size, stage3_max_live_parameters,
  // stage3_max_reuse_distance, stage3_param_persistence_threshold).
  struct Prefetch {
    int64_t prefetch_bucket_elems = 50000000;  // 0 disables prefetch
    int64_t max_live_elems = 1000000000;
    int64_t max_reuse_distance = 1000000000;
    int64_t persistence_threshold = 100000;  // parameters with fewer elements stay gathered
  } prefetch;
  // How gradients are reduced.
  struct Reduction {
    bool overlap_comm = true;                 // reduce-scatter from the hooks (else at the end of backward)
    int64_t reduce_bucket_elems = 500000000;  // reduce_bucket_size: elements of gradient reductions in flight
    bool prescale_gradients = false;
    double gradient_predivide_factor = 1.0;
  } reduction;
  // Where the masters and the partitions live (offload_optimizer, offload_param: FSDP2's OffloadPolicy).
  // Hand glibc's freed heap back to the kernel after each backward (heap_trim.h; CPU engines).
  bool trim_heap_after_backward = false;
  struct Offload {
    // ZeRO-Offload (offload_optimizer.device "cpu"): fp32 masters in host memory (pinned if asked), gradients copied
    // there for the CPU optimizer, the updated partition copied back to the model-dtype shard the gathers read.
    bool offload_to_host = false;
    // With offload_to_host: each partition's final gradient goes to its host copy as soon as a boundary backward has
    // reduced it (on an accelerator, into pinned memory only: asynchronously, on a copy stream, overlapping the rest
    // of backward), rather than all at step_grads. Only when nothing reads the host copies during the next backward (no
    // overlapped or speculative step, no ZenFlow).
    bool early_host_grads = false;
    bool pin_memory = false;
    // ZeRO-Infinity (offload_optimizer.device "nvme"): the masters live in the optimizer swapper's files, not
    // here; masters() is empty, the model-dtype shards are their own buffers, and the engine writes each updated
    // slice into them with write_slice().
    bool external_masters = false;
    // ZeRO-Infinity (offload_param.device "nvme"): the model-dtype partitions of every unit except the persistent
    // one live in a file under this directory (created; the file is removed with the Stage3) and are read straight
    // into the gather buffer when a unit's gather is issued, so ahead of use when it is prefetched; after each
    // optimizer step the updated partitions are written back. Empty: partitions stay in memory.
    std::string param_swap_dir;
    swap::AioOptions aio;
    // offload_param.buffer_size: the largest partition (elements) one unit's flat may have on this rank.
    int64_t param_buffer_elems = 100000000;
    // offload_param.buffer_count / pin_memory: on an accelerator, swapped partitions pass through a ring of this many
    // host buffers (swap/staging_ring.h); pinned, each read's copy to the device runs while the next read does (not
    // pinned, the copies are synchronous). A CPU device reads straight into the gather buffer and makes no ring.
    int param_buffer_count = 5;
    bool param_swap_pin = false;
    // offload_param.max_in_cpu: elements of this rank's partitions kept in host memory instead of the swap file (as
    // DeepSpeed keeps that many in its CPU flat buffer): whole units, the last ones before the persistent unit, while
    // they fit.
    int64_t param_max_in_cpu = 0;
    // ZeRO-Offload of parameters (offload_param.device "cpu"): every model-dtype partition lives in host memory (pinned
    // if param_pin_memory) and is copied into its slice of the device's gather buffer when the gather is issued, so
    // ahead of use when prefetched; the optimizer step writes the updated partitions there. On a CPU device host memory
    // is the device's: the partitions stay where they are and nothing more is allocated or copied; only the accounting
    // (StageBytes::host_params) says they are offloaded.
    bool params_on_host = false;
    bool param_pin_memory = false;
  } offload;
  // ZeRO++: quantized weights (qwZ) and gradients (qgZ), hierarchical partitions (hpZ).
  struct Quantization {
    // ZeRO++ qwZ (zero_quantized_weights): the training schedule's gathers (forward, backward, prefetch) send each
    // partition as block-wise int8 with fp32 scales (block_quantizer.h) and dequantize it on arrival, so every rank
    // computes with the same quantized weights; the masters stay exact. Not the persistent unit (gathered once per
    // step, small by definition) and not GatheredParameters (which reads and writes exact values).
    bool quantized_weights = false;
    // ZeRO++ qgZ (zero_quantized_gradients): each unit's gradient reduction is an all-to-all of int4 blocks (one fp32
    // scale per block, block_quantizer.h) in place of the reduce-scatter: every rank quantizes the chunk each other
    // rank owns, and sums what it receives, dequantized, with its own chunk unquantized, in fp32. Replaces comm_dtype's
    // wire. With ranks on several hosts (ranks_per_node below the world) two levels, as ZeRO++: see
    // send_quantized_in_node.
    bool quantized_gradients = false;
    // Ranks per host (the launcher's LOCAL_WORLD_SIZE), numbered host by host; 0: unknown (one level).
    int ranks_per_node = 0;
    // ZeRO++ hpZ (zero_hpz_partition_size): when a unit is released after a forward that backward follows, each rank
    // keeps its 1/hpz_size slice of the gathered unit (a secondary partition over consecutive groups of hpz_size ranks,
    // one host's when hpz_size divides the ranks per host); that backward's gather of the unit is an all-gather within
    // the group. Under qwZ the slice is the int8 blocks (and scales) forward received, so the group gather is
    // quantized too and backward computes with forward's values. Secondary partitions are dropped when backward ends
    // (the step changes the weights). 1: off.
    int hpz_size = 1;
  } quantization;
};

class Stage3 : public Stage,
               public SlicedMasters,
               public FinalGradients,
               public PartitionWrites,
               public GatheredUnits,
               public PeakCounters {
 public:
  // Partitions the parameters of `groups` (each a list of the module's parameters; together every trainable
  // parameter) across `world`. Units are found under `module`; construction-time partitions (zero::Init) are taken
  // over one unit at a time. Every rank ends up with rank 0's values.
  Stage3(const std::shared_ptr<torch::nn::Module>& module, const std::vector<std::vector<at::Tensor>>& groups,
         comm::ProcessGroup world, Stage3Options options);
  ~Stage3();
  Stage3(const Stage3&) = delete;
  Stage3& operator=(const Stage3&) = delete;

  // ---- Stage (stage.h) ----
  void begin_forward() override;
  void end_forward() override;
  // Every pass reduces (stage 3 keeps no full gradients to accumulate in); `boundary` only arms on_final_gradients.
  void begin_backward(bool boundary) override;
  void on_final_gradients(std::function<void(size_t, int64_t, const at::Tensor&)> ready) override {
    final_gradients_ = std::move(ready);
  }
  void finish_backward() override;
  void zero_grads() override;
  void write_partition_values(size_t group, const at::Tensor& positions, const at::Tensor& values) override;
  // Units held gathered are released and the persistent unit gathered again from the written partitions.
  void finish_partition_writes() override;
  void begin_batched_writes() override;
  void end_batched_writes(bool refresh) override;
  // Per group: fp32 masters (this rank's partitions).
  const std::vector<at::Tensor>& masters() const override { return masters_; }
  // Their accumulated averaged fp32 gradients, or (offload) copies of them in host memory.
  std::vector<at::Tensor> step_grads() override;
  double global_norm(const std::vector<at::Tensor>& grads) const override;
  std::optional<std::pair<size_t, size_t>> first_overflow(const std::vector<at::Tensor>& grads) const override;
  // After the optimizer updated masters(): refresh the low-precision partitions and the persistent parameters.
  void publish() override;
  // With external masters: the updated slice written into the model-dtype shard; copy_back_slice is the shard
  // slice an optimizer kernel may write in its pass (bf16/fp16 in host memory), else undefined.
  at::Tensor initial_master(size_t group) const override;
  void write_slice(size_t group, int64_t offset, const at::Tensor& master) override;
  at::Tensor copy_back_slice(size_t group, int64_t offset, int64_t n) const override;
  std::vector<MasterFragment> master_fragments() const override;
  // Also refreshes every gathered parameter. Collective.
  void restore_from_masters() override;
  // Released parameters are empty tensors; these are their full shapes.
  std::vector<std::vector<std::vector<int64_t>>> param_shapes() const override;
  // The parameters of each unit (module order, then root and persistent).
  std::vector<std::vector<at::Tensor>> gather_units() const override;
  StageBytes bytes() const override;
  StageStates states() const override;
  Stage3Stats stats() const override;
  void reset_peaks() override;

  const std::vector<at::Tensor>& partition_grads() const { return grads_; }
  int64_t host_grad_bytes() const;
  // This rank's model-dtype partitions (the fp32 masters themselves when the model is fp32 without offload).
  const std::vector<at::Tensor>& shard_buffers() const { return separate_shards() ? lowp_ : masters_; }

  // Bytes this rank holds at rest: partitions in the model dtype (the fp32 masters when the model is fp32) plus
  // the persistent parameters in full.
  int64_t param_bytes() const;
  int64_t master_copy_bytes() const;  // fp32 master copies beyond param_bytes (bf16/fp16 models)
  int64_t grad_bytes() const;
  // Gathered units in use, and hpZ's secondary partitions held between a forward and its backward.
  int64_t working_bytes() const;

  // Called through the unit hooks and autograd (unit_autograd.cc).
  void unit_pre_forward(int id);
  at::Tensor unit_post_forward(int id, const at::Tensor& output);
  void unit_pre_backward(int id);
  void param_grad_ready(int id);


  // GatheredParameters support: gathers every unit holding one of `params` (returns their ids); scatter_back()
  // broadcasts `modifier_rank`'s full values and stores this rank's partitions (masters included).
  std::vector<int> gather_for_access(const std::vector<at::Tensor>& params);
  void end_access(const std::vector<int>& ids, int modifier_rank);

  struct Flat;
  struct Unit;

 private:
  // Construction (stage3.cc): the ZeRO++ groups, the units and their layouts, then each group's buffers.
  void form_groups();
  std::vector<int64_t> make_units(const std::shared_ptr<torch::nn::Module>& module,
                                  const std::vector<std::vector<at::Tensor>>& groups);
  void allocate_group_buffers(const std::vector<int64_t>& group_size);
  void size_working_set_from_units();
  void build_unit(Unit& unit);
  void fetch(Unit& unit);
  // `exact`: gather the model-dtype values even under quantized_weights (GatheredParameters).
  void gather_async(Unit& unit, bool prefetch, bool exact = false);
  // The all-gather of one flat into its gathered buffer, one function per way a unit is gathered (chosen once per
  // gather for the whole unit): from the world's partitions as they are or quantized, or (hpZ, in backward) from the
  // secondary group's slices as they are or quantized.
  void gather_flat(Flat& f);
  void gather_flat_quantized(Flat& f);
  void gather_flat_secondary(Flat& f);
  void gather_flat_secondary_quantized(Flat& f);
  // `keep_group_slice`: hpZ after a forward gather: keep this rank's secondary slice of the blocks (keep_secondary).
  void dequantize_gathered(Flat& f, bool keep_group_slice);
  // hpZ: keeps this rank's slice of the gathered `unit` for its backward's gather; drop_secondary frees it.
  void keep_secondary(Unit& unit);
  void drop_secondary(Unit& unit);
  // Each rank's quantization blocks of `f` (computed at first use).
  void plan_quantization(Flat& f);

  void wait_gathered(Unit& unit);
  void release(Unit& unit);
  void prefetch_after(const Unit& unit);
  bool keep_for_reuse(const Unit& unit) const;
  void make_room(int64_t elems, const Unit& wanted);
  void expect_grads(Unit& unit);
  void arm_grads(Unit& unit);
  void reduce_grads(Unit& unit);
  void drain_reductions(size_t keep, int64_t incoming = 0);
  void note_live(int64_t delta);
  // unit_autograd.cc: the glue to autograd and to the unit wrappers.
  std::shared_ptr<detail::UnitHooks> make_unit_hooks(int id);
  at::Tensor attach_pre_backward(const at::Tensor& output, int id);
  void register_grad_hook(int id, const at::Tensor& param);
  void remove_grad_hooks();

  mutable comm::ProcessGroup world_;  // collectives are non-const; the handle's identity never changes
  comm::ProcessGroup hpz_group_;      // hpZ: this rank's group of hpz_size consecutive ranks (unset when off)
  // Two-level qgZ: this rank's host's ranks, and the ranks of its local rank on every host (unset with one level).
  comm::ProcessGroup node_group_, cross_node_group_;
  int nodes_ = 1;  // hosts, when node_group_ is set
  Stage3Options options_;
  BufferPool pool_;
  PrefetchCoordinator coordinator_;
  std::vector<std::unique_ptr<Unit>> units_;  // units in module order, then root, then persistent
  int root_ = -1, persistent_ = -1;
  // begin_batched_writes() depth, and whether a re-gather of the persistent unit was put off inside it.
  int batched_writes_ = 0;
  bool regather_pending_ = false;
  std::vector<at::Tensor> masters_, lowp_, grads_;  // per group, this rank's partitions back to back
  std::vector<at::Tensor> host_grads_;              // offload only
  // The model-dtype shards are their own buffers (lowp_) rather than the masters themselves.
  at::ScalarType master_dtype() const {
    return options_.precision.model_dtype_masters ? options_.precision.dtype : at::kFloat;
  }
  bool separate_shards() const {
    return options_.precision.dtype != master_dtype() || options_.offload.offload_to_host ||
           options_.offload.external_masters || param_io_ != nullptr || shards_on_host();
  }
  // offload_param "cpu" with the model on another device: the shards are host buffers of their own.
  bool shards_on_host() const { return options_.offload.params_on_host && !options_.device.is_cpu(); }
  // stage3_param_swap.cc: offload_param nvme.
  void setup_param_swap(const std::vector<int64_t>& group_size);
  // This rank's partition of `f` in the model dtype: read from the swap file, or copied from memory.
  void load_shard(const Flat& f, const at::Tensor& dst);
  // The persistent unit gathered again from the partitions (after they changed). Collective.
  void regather_persistent();
  // offload_param cpu with pin_memory on an accelerator: a gather's copy up from a host shard is issued without
  // waiting, on copy_stream_ (gather_async): it and the all-gather after it overlap the compute stream's work, which
  // waits for them only where the unit is used (wait_gathered). Every write into the host shards first waits for the
  // copies issued so far, so none reads a half-written partition.
  std::unique_ptr<accelerator::Stream> copy_stream_;
  int copy_stream_device_ = -1;  // the device copy_stream_ belongs to (the gathered buffers')
  // early_host_grads: the gradient partitions' copies down, and their end.
  GradCopyDown grad_copies_;
  // Copies `f`'s final gradient partition (`acc`) into its host copy (early_host_grads).
  void copy_final_grad_to_host(Flat& f, const at::Tensor& acc);
  accelerator::HostReadFence host_reads_;
  void wait_host_reads() const;
  // Stores `values` (this rank's partition of `f`, any float dtype) as its model-dtype shard.
  void store_shard(const Flat& f, const at::Tensor& values);
  void remove_param_swap() noexcept;
  std::unique_ptr<swap::AioHandle> param_io_;
  std::unique_ptr<swap::SwapFile> param_swap_file_;  // unlinked at once: gone however the process ends
  std::unique_ptr<swap::StagingRing> param_staging_;  // an accelerator's swap buffers (null on CPU)
  std::string param_file_;                           // its I/O path
  std::vector<int64_t> lowp_base_;  // per group: where lowp_ starts in the group's partition space
  std::function<void(size_t, int64_t, const at::Tensor&)> final_gradients_;  // on_final_gradients
  bool boundary_backward_ = false;
  std::vector<GradAccumulatorRef> accumulators_;  // kept alive (FACTS.md)
  // A graph built by forward can run its backward after the engine (and this stage) is gone; its pre-backward
  // hooks and gradient-ready hooks (which GatheredParameters finds: param_owner.h) hold this weakly. Reset first in the destructor.
  std::shared_ptr<Stage3*> self_ref_ = std::make_shared<Stage3*>(this);
  std::vector<uintptr_t> hook_keys_;
  struct PendingReduce;
  // qgZ: sends the unit gradient in `r.input` as int4 chunks; sum_quantized: this rank's partition of the sum (a
  // pool buffer). The two-level variants with hosts: see stage3_grads.cc.
  void send_quantized(PendingReduce& r, Flat& f);
  at::Tensor sum_quantized(PendingReduce& r, Flat& f);
  void send_quantized_in_node(PendingReduce& r, Flat& f);
  at::Tensor sum_quantized_across_nodes(PendingReduce& r, Flat& f);
  std::vector<PendingReduce> pending_;
  int64_t pending_elems_ = 0;
  Stage3Stats stats_;
  mutable WaitClock waits_;  // the gather and reduce waits behind stats_ (resolved when stats() reads them)
  bool in_backward_ = false;
};

}  // namespace deepspeed::zero
