// Stage 3's per-unit bookkeeping (see stage3.h), shared by the files that implement Stage3.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "zero/partition.h"
#include "zero/stage3/stage3.h"

namespace deepspeed::zero {

// The parameters of one unit that belong to one parameter group, as one partitioned flat buffer.
struct Stage3::Flat {
  size_t group = 0;
  std::vector<at::Tensor> params;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets, numels;
  std::vector<size_t> index_in_group;
  PartitionLayout layout;
  int64_t group_offset = 0;  // where this rank's partition starts in the group's buffers
  int64_t swap_offset = -1;  // offload_param nvme: where its partition sits in the swap file (bytes); -1 in memory
  at::Tensor full;           // model dtype, padded; its storage points at `gathered` or at nothing
  at::Tensor gathered;       // the pool buffer behind `full` while gathered
  at::Tensor grad_full;      // pool buffer the parameters' .grad are views of during backward
  comm::Work gather_work;    // the all-gather into `gathered` (one collective per flat)
  // quantized_weights: every rank's int8 blocks and their scales while the gather is in flight (gather_work brings
  // the values, scale_work the scales), dequantized into `gathered` when it lands.
  at::Tensor q_values, q_scales;
  comm::Work scale_work;
  std::vector<std::vector<int64_t>> q_blocks;  // each rank's quantization blocks (block_quantizer.h), at first use
  int64_t q_max_blocks = 0;                    // the most any rank has: each rank's share of q_scales
  // hpZ: this rank's slice of the padded flat as its last forward gathered it: the model dtype, or under qwZ the
  // int8 blocks forward received (its group's world partitions) with their scales in secondary_scales, so that
  // backward's group gather is quantized too and dequantizes to forward's values.
  at::Tensor secondary, secondary_scales;
  at::Tensor forward_q_values, forward_q_scales;  // hpZ + qwZ: that slice of a forward gather's blocks until release
  bool reported = false;     // on_final_gradients: its final gradient was reported in this boundary backward
  bool host_copied = false;  // early_host_grads: its final gradient was copied to host memory in this backward

  at::Tensor shard(const Stage3& s) const;  // this rank's partition in the model dtype
};

struct Stage3::Unit {
  // Where the unit's parameters are, FSDP2's sharded states (torch/distributed/fsdp/_fully_shard):
  //   kSharded             released: only this rank's partition is held
  //   kShardedPostForward  released after a forward that backward follows, with hpZ's secondary slice kept, from
  //                        which backward's gather runs within the secondary group (keep_secondary)
  //   kGathering           a gather is in flight (gather_async; wait_gathered lands it)
  //   kGathered            whole, the parameters point into the gathered buffer
  // release() goes to kShardedPostForward while the secondary slice is held, else to kSharded; drop_secondary()
  // takes kShardedPostForward to kSharded (the weights change at the step).
  enum class State { kSharded, kShardedPostForward, kGathering, kGathered };
  int id = 0;
  std::string name;
  bool root = false;
  bool persistent = false;
  std::vector<Flat> flats;
  int64_t numel = 0;  // padded elements gathered when whole
  State state = State::kSharded;
  bool sharded() const { return state == State::kSharded || state == State::kShardedPostForward; }
  bool prefetched = false;  // its in-flight gather was issued ahead of use (for the wait timers)
  bool quantized = false;   // gathered through int8 (quantized_weights): the values are not exact
  bool via_secondary = false;        // the gather in flight or done came from hpZ's secondary partitions
  // offload_param cpu with pinned shards on an accelerator: the copies up (and the all-gathers) of the gather in
  // flight were issued on the copy stream, ending at this event, which the compute stream waits for at its use.
  std::unique_ptr<accelerator::Event> copied;
  bool on_copy_stream = false;
  bool secondary_quantized = false;  // the secondary partitions hold int8-gathered values
  // Its gradients in the current backward, a state machine beside the sharded one (FSDP2 keeps its TrainingState
  // beside the sharded state the same way):
  //   kNone      no backward of it is under way (before it, and after finish_backward)
  //   kExpected  its backward began (unit_pre_backward; the root and persistent units at begin_backward): gradients
  //              are due, no buffer taken yet
  //   kArmed     its gradient buffer is taken (arm_grads, at its first gradient); the parameters' .grad view it
  //   kReduced   its reduce-scatter was issued (reduce_grads); it is not reduced twice in one backward
  // expect_grads enters kExpected (again, for a unit whose backward runs a second time), arm_grads kArmed,
  // reduce_grads kReduced, finish_backward kNone.
  enum class Grads { kNone, kExpected, kArmed, kReduced };
  Grads grads = Grads::kNone;
  bool awaiting_grads() const { return grads == Grads::kExpected || grads == Grads::kArmed; }
  // In use by a forward or backward computing now: make_room and gather_for_access leave it gathered. A pin apart
  // from `grads`, because the two overlap: a recompute forward (activation checkpointing) runs inside backward, and
  // without overlap_comm a unit's gradients are reduced at finish_backward while it is still in use.
  bool in_use = false;
  int pending_grads = 0;
  int num_params = 0;
  std::shared_ptr<UnitBase> module;  // null for the root and persistent units
};

// Units whose gradient reductions may be in flight at once (the newest always is): enough to overlap
// communication with the rest of backward without a queue of gradient buffers. reduce_bucket_size bounds their
// elements beyond the newest unit, so a small bucket leaves one unit's in flight (what a CPU box wants: each unit's
// buffer is resident memory).
constexpr size_t kMaxPendingReductions = 2;

struct Stage3::PendingReduce {
  Unit* unit = nullptr;
  size_t flat = 0;
  comm::Work work;     // the reduce-scatter (one collective per flat)
  at::Tensor input;  // pool buffer: the unit's whole gradient; reduced in place, this rank's slice holds the result
  bool input_is_grad = false;
  // qgZ: the int4 chunks and scales sent to each rank and received from each (work brings the values, scale_work
  // the scales); `input` keeps this rank's own chunk exact.
  bool quantized = false;
  bool across_nodes = false;  // two levels: these buffers are the first's, within the host
  at::Tensor q_send, q_recv, s_send, s_recv;
  comm::Work scale_work;
};

}  // namespace deepspeed::zero
