// Stage 3's gradients: pooled per-unit gradient buffers during backward, reduce-scatter into this rank's fp32
// accumulators as each unit completes, and the step-side reductions (norm, overflow, publish) over partitions.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "zero/block_quantizer.h"
#include "zero/global_norm.h"
#include "zero/stage3/heap_trim.h"
#include "zero/stage3/stage3.h"
#include "zero/stage3/stage3_state.h"
#include "zero/wall_clock.h"

namespace deepspeed::zero {
namespace {

constexpr int64_t kGroupStride = int64_t{1} << 40;

}  // namespace

void Stage3::expect_grads(Unit& unit) {
  // A unit still armed (a backward that threw before finish_backward) keeps its gradient buffer.
  if (unit.grads != Unit::Grads::kArmed) unit.grads = Unit::Grads::kExpected;
  unit.pending_grads = unit.num_params;
}

// Takes the unit's gradient buffer when its first gradient arrives, not when its backward begins: the backward
// of a unit starts right where the activations' gradients peak (the loss's, at the head), and the buffer is not
// needed before autograd hands over a parameter's gradient, by which time the activation gradient it came from is
// gone.
void Stage3::arm_grads(Unit& unit) {
  if (unit.grads == Unit::Grads::kArmed) return;
  DS_ASSERT(unit.grads == Unit::Grads::kExpected, "unit ", unit.name, ": gradients armed outside its backward");
  at::NoGradGuard no_grad;
  // The gradient elements held at once (this unit's new buffer and the reductions still in flight) stay within
  // reduce_bucket_size: reductions that would not fit beside the new buffer finish first (a unit larger than the
  // bucket is held alone). On a CPU box every buffer is resident memory, and this is what keeps stage 3's backward
  // at the gathered units plus one unit's gradients; a GPU config's large bucket keeps them in flight.
  drain_reductions(kMaxPendingReductions * unit.flats.size(), unit.numel);
  for (auto& f : unit.flats) {
    f.grad_full = pool_.acquire(options_.precision.dtype, f.layout.padded_numel());
    f.grad_full.zero_();
    for (size_t i = 0; i < f.params.size(); ++i) {
      at::Tensor view = f.grad_full.narrow(0, f.offsets[i], f.numels[i]).view(f.shapes[i]);
      at::Tensor& g = f.params[i].mutable_grad();
      if (g.defined()) view.copy_(g);  // the gradient whose arrival armed the unit
      g = view;
    }
  }
  unit.grads = Unit::Grads::kArmed;
}

void Stage3::param_grad_ready(int id) {
  if (!in_backward_) return;
  Unit& unit = *units_.at(id);
  if (!unit.awaiting_grads()) return;
  arm_grads(unit);
  if (--unit.pending_grads > 0 || !options_.reduction.overlap_comm || unit.root || unit.persistent) return;
  reduce_grads(unit);
  unit.in_use = false;
  if (!keep_for_reuse(unit)) release(unit);
}

void Stage3::reduce_grads(Unit& unit) {
  if (!unit.awaiting_grads()) return;
  arm_grads(unit);  // none of its gradients arrived: it reduces zeros, so that every rank runs the same collectives
  at::NoGradGuard no_grad;
  const int n = world_.size();
  const double pre =
      options_.reduction.prescale_gradients ? 1.0 / n : 1.0 / options_.reduction.gradient_predivide_factor;
  for (size_t fi = 0; fi < unit.flats.size(); ++fi) {
    Flat& f = unit.flats[fi];
    // Autograd may have replaced a view with its own tensor (e.g. a user reassigned .grad); fold it back in.
    for (size_t i = 0; i < f.params.size(); ++i) {
      at::Tensor& g = f.params[i].mutable_grad();
      at::Tensor view = f.grad_full.narrow(0, f.offsets[i], f.numels[i]);
      if (g.defined() && g.data_ptr() != view.data_ptr()) view.copy_(g.reshape({-1}));
      g = at::Tensor();
    }
    PendingReduce r;
    r.unit = &unit;
    r.flat = fi;
    // With nothing to communicate the partition takes the gradient in fp32, unrounded.
    const at::ScalarType wire = n > 1 ? options_.precision.comm_dtype : at::kFloat;
    if (n > 1 && options_.quantization.quantized_gradients) {
      r.input = f.grad_full;
      r.input_is_grad = true;
      if (pre != 1.0) r.input.mul_(pre);
      if (node_group_.is_member()) {
        send_quantized_in_node(r, f);
      } else {
        send_quantized(r, f);
      }
    } else if (options_.precision.dtype == wire) {
      r.input = f.grad_full;
      r.input_is_grad = true;
    } else {
      r.input = pool_.acquire(wire, f.layout.padded_numel());
      r.input.copy_(f.grad_full);
      pool_.release(std::move(f.grad_full));
    }
    f.grad_full = at::Tensor();
    if (n > 1 && !r.quantized) {
      // One reduce-scatter per flat, in place on the gradient buffer (scratch from here on): this rank's slice of
      // it receives the reduction of its partition, with no second buffer.
      if (pre != 1.0) r.input.mul_(pre);
      r.work = world_.reduce_scatter_in_place(r.input, comm::ReduceOp::kSum, /*async_op=*/true);
    }
    pending_elems_ += r.input.numel();
    pending_.push_back(std::move(r));
  }
  unit.grads = Unit::Grads::kReduced;
  drain_reductions(kMaxPendingReductions * unit.flats.size());
  // What stays in flight while backward goes on.
  stats_.peak_pending_reduce_elems = std::max(stats_.peak_pending_reduce_elems, pending_elems_);
}

void Stage3::drain_reductions(size_t keep, int64_t incoming) {
  const int n = world_.size();
  const double post = n == 1                                  ? 1.0
                      : options_.reduction.prescale_gradients ? 1.0
                                                              : options_.reduction.gradient_predivide_factor / n;
  size_t done = 0;
  // Oldest first, until at most `keep` remain and their elements fit in reduce_bucket_size: beside `incoming` (a
  // gradient buffer about to be taken) when there is one, else beyond the newest, which must travel whatever its
  // size.
  auto over = [&] {
    const size_t left = pending_.size() - done;
    if (left > keep) return true;
    if (incoming > 0) return left > 0 && pending_elems_ + incoming > options_.reduction.reduce_bucket_elems;
    return left > 1 && pending_elems_ > options_.reduction.reduce_bucket_elems;
  };
  while (over()) {
    PendingReduce& r = pending_[done++];
    pending_elems_ -= r.input.numel();
    Flat& f = r.unit->flats[r.flat];
    at::Tensor acc = grads_[f.group].narrow(0, f.group_offset, f.layout.partition_size());
    WaitClock::Span span = waits_.begin();
    r.work.wait();
    r.scale_work.wait();
    waits_.end(std::move(span), &stats_.reduce_wait_ms);
    at::Tensor mine = r.across_nodes ? sum_quantized_across_nodes(r, f)
                      : r.quantized  ? sum_quantized(r, f)
                                     : r.input.narrow(0, f.layout.begin(f.layout.rank()), f.layout.partition_size());
    if (post != 1.0) {
      acc.add_(mine, post);
    } else {
      acc.add_(mine);
    }
    if (r.quantized) pool_.release(std::move(mine));
    pool_.release(std::move(r.input));
    if (boundary_backward_ && final_gradients_) {
      final_gradients_(f.group, f.group_offset, acc);
      f.reported = true;
    }
    if (boundary_backward_ && options_.offload.early_host_grads) copy_final_grad_to_host(f, acc);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

namespace {

// qgZ's wire: `x` as int4 blocks packed into `packed` (int4_bytes of x's elements) with their `scales`; `q` is int8
// scratch of x's size.
void quantize_int4(const at::Tensor& x, const std::vector<int64_t>& blocks, at::Tensor q, at::Tensor scales,
                   at::Tensor packed) {
  quantize_blocks(x, blocks, q, std::move(scales), /*bits=*/4);
  pack_int4(q, std::move(packed));
}

// And back: adds the chunk in `packed` / `scales`, dequantized, into `sum` (`q`, `values`: scratch of sum's size).
void add_int4(const at::Tensor& packed, const at::Tensor& scales, const std::vector<int64_t>& blocks, at::Tensor q,
              at::Tensor values, at::Tensor sum) {
  unpack_int4(packed, q);
  dequantize_blocks(q, scales, blocks, values);
  sum.add_(values);
}

}  // namespace

void Stage3::send_quantized(PendingReduce& r, Flat& f) {
  plan_quantization(f);
  const int n = world_.size();
  const int64_t part = f.layout.partition_size(), bytes = int4_bytes(part), blocks = f.q_max_blocks;
  r.quantized = true;
  // The wire buffers come from the pool, as the gradient buffers do (reused from step to step, counted as in use).
  r.q_send = pool_.acquire(at::kChar, n * bytes);
  r.q_recv = pool_.acquire(at::kChar, n * bytes);
  r.s_send = pool_.acquire(at::kFloat, n * blocks);
  r.s_recv = pool_.acquire(at::kFloat, n * blocks);
  r.s_send.zero_();  // a rank's chunk with fewer blocks than the most leaves its tail of scales unwritten
  r.q_send.narrow(0, f.layout.rank() * bytes, bytes).zero_();  // this rank's own chunk stays exact (sent as zeros)
  at::Tensor q = pool_.acquire(at::kChar, part);
  for (int d = 0; d < n; ++d) {
    if (d == f.layout.rank()) continue;
    quantize_int4(r.input.narrow(0, f.layout.begin(d), part), f.q_blocks[d], q, r.s_send.narrow(0, d * blocks, blocks),
                  r.q_send.narrow(0, d * bytes, bytes));
  }
  pool_.release(std::move(q));
  r.work = world_.all_to_all_single(r.q_recv, r.q_send, {}, {}, /*async_op=*/true);
  r.scale_work = world_.all_to_all_single(r.s_recv, r.s_send, {}, {}, /*async_op=*/true);
}

// This rank's chunk exactly, plus every other rank's int4 copy of it, summed in fp32 in rank order (a pool buffer:
// the caller releases it).
at::Tensor Stage3::sum_quantized(PendingReduce& r, Flat& f) {
  const int n = world_.size(), me = f.layout.rank();
  const int64_t part = f.layout.partition_size(), bytes = int4_bytes(part), blocks = f.q_max_blocks;
  at::Tensor sum = pool_.acquire(at::kFloat, part);
  sum.copy_(r.input.narrow(0, f.layout.begin(me), part));
  at::Tensor q = pool_.acquire(at::kChar, part);
  at::Tensor values = pool_.acquire(at::kFloat, part);
  for (int s = 0; s < n; ++s) {
    if (s == me) continue;
    add_int4(r.q_recv.narrow(0, s * bytes, bytes), r.s_recv.narrow(0, s * blocks, blocks), f.q_blocks[me], q, values,
             sum);
  }
  for (at::Tensor* t : {&q, &values, &r.q_send, &r.q_recv, &r.s_send, &r.s_recv}) pool_.release(std::move(*t));
  return sum;
}

// Two levels (ZeRO++'s hierarchical qgZ), for ranks on M hosts of L each (rank = host * L + local rank). Within the
// host first: local rank l receives from each host peer the int4 chunks of the owners with local rank l on every host
// (M chunks), and adds them, dequantized, to its own, exact: the host's partial sums for those owners. Then across
// hosts, among the ranks of local rank l (cross_node_group_): each partial goes, as int4 again, to its owner's host,
// where the owner adds the M partials (its own host's exact) in host order. A rank sends M - 1 chunks across hosts
// where one level sends L (M - 1); each other host's share is quantized twice, so the result moves further (the
// sum of both levels' half steps) from the exact one.
void Stage3::send_quantized_in_node(PendingReduce& r, Flat& f) {
  plan_quantization(f);
  const int l_size = node_group_.size(), me = node_group_.rank();
  const int64_t part = f.layout.partition_size(), bytes = int4_bytes(part), blocks = f.q_max_blocks;
  const int64_t chunks = static_cast<int64_t>(l_size) * nodes_;
  r.quantized = r.across_nodes = true;
  r.q_send = pool_.acquire(at::kChar, chunks * bytes);
  r.q_recv = pool_.acquire(at::kChar, chunks * bytes);
  r.s_send = pool_.acquire(at::kFloat, chunks * blocks);
  r.s_recv = pool_.acquire(at::kFloat, chunks * blocks);
  r.s_send.zero_();
  r.q_send.narrow(0, me * nodes_ * bytes, nodes_ * bytes).zero_();  // this rank's owners' chunks stay exact
  at::Tensor q = pool_.acquire(at::kChar, part);
  for (int peer = 0; peer < l_size; ++peer) {
    if (peer == me) continue;
    for (int host = 0; host < nodes_; ++host) {
      const int owner = host * l_size + peer;
      const int64_t slot = static_cast<int64_t>(peer) * nodes_ + host;
      quantize_int4(r.input.narrow(0, f.layout.begin(owner), part), f.q_blocks[owner], q,
                    r.s_send.narrow(0, slot * blocks, blocks), r.q_send.narrow(0, slot * bytes, bytes));
    }
  }
  pool_.release(std::move(q));
  r.work = node_group_.all_to_all_single(r.q_recv, r.q_send, {}, {}, /*async_op=*/true);
  r.scale_work = node_group_.all_to_all_single(r.s_recv, r.s_send, {}, {}, /*async_op=*/true);
}

at::Tensor Stage3::sum_quantized_across_nodes(PendingReduce& r, Flat& f) {
  const int l_size = node_group_.size(), me = node_group_.rank(), host = cross_node_group_.rank();
  const int64_t part = f.layout.partition_size(), bytes = int4_bytes(part), blocks = f.q_max_blocks;
  at::Tensor q = pool_.acquire(at::kChar, part);
  at::Tensor values = pool_.acquire(at::kFloat, part);
  // This host's partial sums for the owners of local rank `me` on every host.
  at::Tensor partial = pool_.acquire(at::kFloat, nodes_ * part);
  for (int h = 0; h < nodes_; ++h) {
    const int owner = h * l_size + me;
    at::Tensor sum = partial.narrow(0, h * part, part);
    sum.copy_(r.input.narrow(0, f.layout.begin(owner), part));
    for (int peer = 0; peer < l_size; ++peer) {
      if (peer == me) continue;
      const int64_t slot = static_cast<int64_t>(peer) * nodes_ + h;
      add_int4(r.q_recv.narrow(0, slot * bytes, bytes), r.s_recv.narrow(0, slot * blocks, blocks), f.q_blocks[owner],
               q, values, sum);
    }
  }
  for (at::Tensor* t : {&r.q_send, &r.q_recv, &r.s_send, &r.s_recv}) pool_.release(std::move(*t));
  // Across hosts: each partial to its owner's host.
  at::Tensor q_send = pool_.acquire(at::kChar, nodes_ * bytes), q_recv = pool_.acquire(at::kChar, nodes_ * bytes);
  at::Tensor s_send = pool_.acquire(at::kFloat, nodes_ * blocks), s_recv = pool_.acquire(at::kFloat, nodes_ * blocks);
  s_send.zero_();
  q_send.narrow(0, host * bytes, bytes).zero_();
  for (int h = 0; h < nodes_; ++h) {
    if (h == host) continue;
    quantize_int4(partial.narrow(0, h * part, part), f.q_blocks[h * l_size + me], q,
                  s_send.narrow(0, h * blocks, blocks), q_send.narrow(0, h * bytes, bytes));
  }
  {
    WaitClock::Span span = waits_.begin();
    comm::Work values_work = cross_node_group_.all_to_all_single(q_recv, q_send, {}, {}, /*async_op=*/true);
    comm::Work scales_work = cross_node_group_.all_to_all_single(s_recv, s_send, {}, {}, /*async_op=*/true);
    values_work.wait();
    scales_work.wait();
    waits_.end(std::move(span), &stats_.reduce_wait_ms);
  }
  at::Tensor sum = pool_.acquire(at::kFloat, part);
  sum.copy_(partial.narrow(0, host * part, part));
  for (int h = 0; h < nodes_; ++h) {
    if (h == host) continue;
    add_int4(q_recv.narrow(0, h * bytes, bytes), s_recv.narrow(0, h * blocks, blocks), f.q_blocks[f.layout.rank()], q,
             values, sum);
  }
  for (at::Tensor* t : {&q, &values, &partial, &q_send, &q_recv, &s_send, &s_recv}) pool_.release(std::move(*t));
  return sum;
}

void Stage3::begin_backward(bool boundary) {
  in_backward_ = true;
  boundary_backward_ = boundary;
  coordinator_.begin_backward();
  // The root and persistent units collect gradients over the whole backward.
  for (int id : {root_, persistent_}) {
    expect_grads(*units_[id]);
    arm_grads(*units_[id]);
  }
}

void Stage3::finish_backward() {
  // Units whose gradients were not all produced (unused parameters), then the root and persistent units, in unit
  // order, which every rank shares.
  for (auto& unit : units_)
    if (unit->awaiting_grads()) reduce_grads(*unit);
  drain_reductions(0);
  in_backward_ = false;
  // Flats this backward did not reduce (a unit unused in the last micro-batch) hold the window's gradients all the
  // same: they are final now.
  for (auto& unit : units_)
    for (auto& f : unit->flats) {
      const at::Tensor acc = grads_[f.group].narrow(0, f.group_offset, f.layout.partition_size());
      if (boundary_backward_ && final_gradients_ && !f.reported) final_gradients_(f.group, f.group_offset, acc);
      f.reported = false;
      if (boundary_backward_ && options_.offload.early_host_grads && !f.host_copied) copy_final_grad_to_host(f, acc);
    }
  boundary_backward_ = false;
  for (auto& unit : units_) {
    unit->in_use = false;
    unit->grads = Unit::Grads::kNone;
    if (!unit->persistent) release(*unit);
    drop_secondary(*unit);  // the step changes the weights; the next forward gathers afresh
  }
  coordinator_.end_pass();
  if (options_.trim_heap_after_backward) release_freed_heap();  // heap_trim.h
}

void Stage3::copy_final_grad_to_host(Flat& f, const at::Tensor& acc) {
  // Not from a device into pageable memory (those stay at step_grads). `acc` is not written again before step_grads
  // waits for the copy (zero_grads comes after the step).
  if (!grad_copies_.copy(host_grads_[f.group].narrow(0, f.group_offset, f.layout.partition_size()), acc)) return;
  f.host_copied = true;
  stats_.host_grad_copies_in_backward += f.layout.partition_size();
}

void Stage3::zero_grads() {
  for (auto& g : grads_) g.zero_();
}

void Stage3::publish() {
  at::NoGradGuard no_grad;
  // External masters wrote their updated slices into the shards already (write_slice).
  if (separate_shards() && !options_.offload.external_masters) {
    wait_host_reads();
    for (size_t g = 0; g < masters_.size(); ++g)
      lowp_[g].copy_(masters_[g].narrow(0, lowp_base_[g], lowp_[g].numel()));
    if (param_io_)
      for (auto& unit : units_)
        for (auto& f : unit->flats)
          if (f.swap_offset >= 0)
            store_shard(f, masters_[f.group].narrow(0, f.group_offset, f.layout.partition_size()));
  }
  regather_persistent();
}

void Stage3::begin_batched_writes() { ++batched_writes_; }

void Stage3::end_batched_writes(bool refresh) {
  DS_ASSERT(batched_writes_ > 0, "end_batched_writes without begin_batched_writes");
  --batched_writes_;
  if (refresh && batched_writes_ == 0 && regather_pending_) regather_persistent();
}

void Stage3::regather_persistent() {
  if (batched_writes_ > 0) {
    regather_pending_ = true;
    return;
  }
  regather_pending_ = false;
  // The persistent parameters stay gathered, so they take the update now; every other unit on its next gather.
  Unit& persistent = *units_[persistent_];
  for (auto& f : persistent.flats) {
    // As a gather does: this rank's partition into its own slice (a copy up from host memory with offload_param
    // "cpu"), then every other rank's into theirs.
    at::Tensor own = f.gathered.narrow(0, f.layout.begin(f.layout.rank()), f.layout.partition_size());
    load_shard(f, own);
    if (world_.size() > 1) world_.all_gather_into_tensor(f.gathered, own);
  }
}

void Stage3::write_partition_values(size_t group, const at::Tensor& positions, const at::Tensor& values) {
  at::NoGradGuard no_grad;
  DS_CHECK(param_io_ == nullptr, "write_partition_values: partitions swapped to nvme are not written in place");
  // The masters belong to the optimizer (an overlapped step may be writing them now): only partitions of their own.
  DS_ASSERT(separate_shards(), "write_partition_values: the partitions are the masters here");
  if (positions.numel() == 0) return;
  // The in-memory tail of the model-dtype partitions from lowp_base_.
  at::Tensor target = lowp_.at(group);
  wait_host_reads();
  const at::Tensor where = positions.to(target.device()) - lowp_base_[group];
  target.index_copy_(0, where, values.to(target.device(), target.scalar_type()));
}

void Stage3::finish_partition_writes() {
  for (auto& unit : units_)
    if (!unit->persistent) release(*unit);
  regather_persistent();
}

void Stage3::restore_from_masters() {
  // Units kept gathered (for reuse, or a GatheredParameters scope) would go on serving the old values.
  for (auto& unit : units_)
    if (!unit->persistent) release(*unit);
  publish();
}

std::vector<MasterFragment> Stage3::master_fragments() const {
  std::vector<MasterFragment> out;
  for (const auto& unit : units_)
    for (const auto& f : unit->flats) {
      const int rank = f.layout.rank();
      append_master_fragments(f.group, f.index_in_group, f.offsets, f.shapes, f.layout.begin(rank),
                              f.layout.end(rank), f.group_offset, out);
    }
  return out;
}

std::vector<std::vector<std::vector<int64_t>>> Stage3::param_shapes() const {
  std::vector<std::vector<std::vector<int64_t>>> out(masters_.size());
  for (const auto& unit : units_)
    for (const auto& f : unit->flats)
      for (size_t i = 0; i < f.params.size(); ++i) {
        auto& group = out[f.group];
        if (group.size() <= f.index_in_group[i]) group.resize(f.index_in_group[i] + 1);
        group[f.index_in_group[i]] = f.shapes[i];
      }
  return out;
}

std::vector<std::vector<at::Tensor>> Stage3::gather_units() const {
  std::vector<std::vector<at::Tensor>> out;
  for (const auto& unit : units_) {
    std::vector<at::Tensor> params;
    for (const auto& f : unit->flats) params.insert(params.end(), f.params.begin(), f.params.end());
    if (!params.empty()) out.push_back(std::move(params));
  }
  return out;
}

double Stage3::global_norm(const std::vector<at::Tensor>& grads) const {
  return zero::global_norm(grads, &world_);
}

std::optional<std::pair<size_t, size_t>> Stage3::first_overflow(const std::vector<at::Tensor>& grads) const {
  // Each rank finds its first bad parameter (in group order) among its partitions; a MIN all-reduce picks the
  // first over all ranks.
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& unit : units_) {
    for (const auto& f : unit->flats) {
      at::Tensor part = grads[f.group].narrow(0, f.group_offset, f.layout.partition_size());
      if (part.isfinite().all().item<bool>()) continue;
      const int64_t begin = f.layout.begin(f.layout.rank());
      for (size_t i = 0; i < f.params.size(); ++i) {
        const int64_t lo = std::max(begin, f.offsets[i]), hi = std::min(begin + part.numel(), f.offsets[i] + f.numels[i]);
        if (lo >= hi) continue;
        if (part.narrow(0, lo - begin, hi - lo).isfinite().all().item<bool>()) continue;
        first = std::min(first, static_cast<int64_t>(f.group) * kGroupStride + static_cast<int64_t>(f.index_in_group[i]));
      }
    }
  }
  if (world_.size() > 1) {
    at::Tensor t = at::tensor({first}, at::kLong);
    world_.all_reduce(t, comm::ReduceOp::kMin);
    first = t.item<int64_t>();
  }
  if (first == std::numeric_limits<int64_t>::max()) return std::nullopt;
  return std::make_pair(static_cast<size_t>(first / kGroupStride), static_cast<size_t>(first % kGroupStride));
}

}  // namespace deepspeed::zero
