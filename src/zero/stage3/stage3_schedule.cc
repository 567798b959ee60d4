// Stage 3's step-time schedule: fetching units on demand or ahead of use, keeping them for reuse within the live
// and reuse bounds, and releasing them (see stage3.h).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "zero/wall_clock.h"
#include "zero/block_quantizer.h"
#include "zero/stage3/stage3.h"
#include "zero/stage3/stage3_state.h"

namespace deepspeed::zero {

void Stage3::note_live(int64_t delta) {
  stats_.live_elems += delta;
  stats_.peak_live_elems = std::max(stats_.peak_live_elems, stats_.live_elems);
}

void Stage3::gather_async(Unit& unit, bool prefetch, bool exact) {
  if (!unit.sharded()) return;
  std::optional<WaitClock::Span> span;  // a prefetch is issued ahead of need: only a gather on demand is a wait
  if (!prefetch) span = waits_.begin();
  // hpZ: backward gathers a unit its forward left secondary partitions of within the secondary group.
  unit.via_secondary = in_backward_ && !exact && unit.state == Unit::State::kShardedPostForward;
  unit.quantized = unit.via_secondary
                       ? unit.secondary_quantized
                       : options_.quantization.quantized_weights && !exact && !unit.persistent && world_.size() > 1;
  // Pinned host shards go up on the copy stream, and their all-gathers are issued there too (a collective waits for
  // the stream current at its call), so neither holds up the compute stream's kernels queued meanwhile. The copy
  // stream first waits for the compute stream's work so far: a pooled buffer's last reader is among it. Quantized
  // and hpZ gathers, which run kernels of their own on what arrives, stay on the compute stream.
  auto& acc = accelerator::get_accelerator();
  unit.on_copy_stream = shards_on_host() && options_.offload.param_pin_memory && !unit.via_secondary && !unit.quantized;
  for (auto& f : unit.flats) f.gathered = pool_.acquire(options_.precision.dtype, f.layout.padded_numel());
  std::optional<accelerator::StreamGuard> on_copy_stream;  // after the buffers: they belong to the compute stream
  // The streams and events of the buffers' device, whichever device the calling thread has current.
  const int device = unit.flats.empty() ? -1 : unit.flats.front().gathered.device().index();
  if (unit.on_copy_stream) {
    if (!copy_stream_ || copy_stream_device_ != device) {
      if (copy_stream_) copy_stream_->synchronize();
      copy_stream_ = acc.new_stream(device);
      copy_stream_device_ = device;
      for (auto& u : units_) u->copied.reset();  // an event belongs to the device it was recorded on
    }
    const std::unique_ptr<accelerator::Event> queued = acc.new_event();
    queued->record(acc.current_stream(device).get());
    copy_stream_->wait_event(*queued);
    on_copy_stream.emplace(*copy_stream_);
  }
  void (Stage3::*gather)(Flat&) = unit.via_secondary ? (unit.quantized ? &Stage3::gather_flat_secondary_quantized
                                                                          : &Stage3::gather_flat_secondary)
                                 : unit.quantized   ? &Stage3::gather_flat_quantized
                                                    : &Stage3::gather_flat;
  for (auto& f : unit.flats) {
    c10::StorageImpl* st = f.full.storage().unsafeGetStorageImpl();
    st->set_data_ptr_noswap(c10::DataPtr(f.gathered.data_ptr(), f.gathered.device()));
    st->set_nbytes(f.gathered.nbytes());
    (this->*gather)(f);
  }
  if (unit.on_copy_stream) {
    if (!unit.copied) unit.copied = acc.new_event();
    unit.copied->record(copy_stream_.get());
  }
  on_copy_stream.reset();  // the wait below is the compute stream's, not the copy stream's
  unit.state = Unit::State::kGathering;
  unit.prefetched = prefetch;
  ++stats_.gathers;
  if (prefetch) ++stats_.prefetches;
  if (unit.via_secondary) ++stats_.secondary_gathers;
  if (span) waits_.end(std::move(*span), &stats_.gather_ms);
  if (!unit.root && !unit.persistent) note_live(unit.numel);
}

// One all-gather per flat, in place: this rank's partition is loaded into its own slice of the gathered buffer, and
// every other rank's lands in theirs (no staging copy: NCCL gathers in place, and the comm layer runs an in-place
// all-gather on Gloo as one broadcast per owner).
void Stage3::gather_flat(Flat& f) {
  at::Tensor own = f.gathered.narrow(0, f.layout.begin(f.layout.rank()), f.layout.partition_size());
  load_shard(f, own);
  if (world_.size() > 1) f.gather_work = world_.all_gather_into_tensor(f.gathered, own, /*async_op=*/true);
}

// In place as gather_flat, in int8 blocks: this rank quantizes its partition into its own chunk.
void Stage3::gather_flat_quantized(Flat& f) {
  const int64_t part = f.layout.partition_size();
  at::Tensor own = f.gathered.narrow(0, f.layout.begin(f.layout.rank()), part);
  load_shard(f, own);
  plan_quantization(f);
  const int64_t blocks = f.q_max_blocks;
  const int rank = f.layout.rank();
  f.q_values = at::empty({world_.size() * part}, f.gathered.options().dtype(at::kChar));
  f.q_scales = at::zeros({world_.size() * blocks}, f.gathered.options().dtype(at::kFloat));
  at::Tensor own_values = f.q_values.narrow(0, rank * part, part);
  at::Tensor own_scales = f.q_scales.narrow(0, rank * blocks, blocks);
  quantize_blocks(own, f.q_blocks[rank], own_values, own_scales);
  f.gather_work = world_.all_gather_into_tensor(f.q_values, own_values, /*async_op=*/true);
  f.scale_work = world_.all_gather_into_tensor(f.q_scales, own_scales, /*async_op=*/true);
}

// hpZ: this rank's secondary slice into its place in the group's gather.
void Stage3::gather_flat_secondary(Flat& f) {
  const int64_t chunk = f.secondary.numel();
  at::Tensor own = f.gathered.narrow(0, hpz_group_.rank() * chunk, chunk);
  own.copy_(f.secondary);
  f.gather_work = hpz_group_.all_gather_into_tensor(f.gathered, own, /*async_op=*/true);
}

// hpZ, quantized: the group's ranks hold consecutive world partitions' blocks; gathered, they are q_values / q_scales
// laid out as a world gather leaves them.
void Stage3::gather_flat_secondary_quantized(Flat& f) {
  const int64_t chunk = f.secondary.numel();
  const int h = hpz_group_.rank();
  const int64_t scales = f.secondary_scales.numel();
  f.q_values = at::empty({f.layout.padded_numel()}, f.secondary.options());
  f.q_scales = at::empty({scales * options_.quantization.hpz_size}, f.secondary_scales.options());
  at::Tensor own_values = f.q_values.narrow(0, h * chunk, chunk);
  at::Tensor own_scales = f.q_scales.narrow(0, h * scales, scales);
  own_values.copy_(f.secondary);
  own_scales.copy_(f.secondary_scales);
  f.gather_work = hpz_group_.all_gather_into_tensor(f.q_values, own_values, /*async_op=*/true);
  f.scale_work = hpz_group_.all_gather_into_tensor(f.q_scales, own_scales, /*async_op=*/true);
}

void Stage3::wait_gathered(Unit& unit) {
  if (unit.state != Unit::State::kGathering) return;
  WaitClock::Span span = waits_.begin();
  if (unit.on_copy_stream) {
    // The copies up (and, at one rank, the only step): the compute stream goes on once they are done.
    const int device = unit.flats.empty() ? -1 : unit.flats.front().gathered.device().index();
    accelerator::get_accelerator().current_stream(device)->wait_event(*unit.copied);
    unit.on_copy_stream = false;
  }
  for (auto& f : unit.flats) {
    f.gather_work.wait();
    f.gather_work = comm::Work();
    if (unit.quantized) {
      f.scale_work.wait();
      f.scale_work = comm::Work();
      dequantize_gathered(
          f, /*keep_group_slice=*/options_.quantization.hpz_size > 1 && !unit.via_secondary && !in_backward_);
    }
  }
  waits_.end(std::move(span), unit.prefetched ? &stats_.prefetch_wait_ms : &stats_.gather_ms);
  for (auto& f : unit.flats) {
    for (size_t i = 0; i < f.params.size(); ++i)
      f.params[i].set_data(f.full.narrow(0, f.offsets[i], f.numels[i]).view(f.shapes[i]));
  }
  unit.state = Unit::State::kGathered;
}

void Stage3::keep_secondary(Unit& unit) {
  if (options_.quantization.hpz_size <= 1 || unit.root || unit.persistent || unit.state != Unit::State::kGathered)
    return;
  // A quantized gather that did not land in a forward kept no blocks: backward then gathers from the world.
  if (unit.quantized)
    for (const auto& f : unit.flats)
      if (!f.secondary.defined() && !f.forward_q_values.defined()) return;
  for (auto& f : unit.flats) {
    if (f.secondary.defined()) continue;
    if (unit.quantized) {
      f.secondary = std::move(f.forward_q_values);
      f.secondary_scales = std::move(f.forward_q_scales);
      continue;
    }
    const int64_t chunk = f.layout.padded_numel() / options_.quantization.hpz_size;
    f.secondary = f.full.narrow(0, hpz_group_.rank() * chunk, chunk).clone();
  }
  unit.secondary_quantized = unit.quantized;
}

void Stage3::drop_secondary(Unit& unit) {
  for (auto& f : unit.flats) f.secondary = f.secondary_scales = at::Tensor();
  if (unit.state == Unit::State::kShardedPostForward) unit.state = Unit::State::kSharded;
}

void Stage3::plan_quantization(Flat& f) {
  if (!f.q_blocks.empty()) return;
  const int64_t part = f.layout.partition_size();
  for (int r = 0; r < world_.size(); ++r) {
    f.q_blocks.push_back(quantization_blocks(f.offsets, f.numels, f.layout.begin(r), f.layout.begin(r) + part));
    f.q_max_blocks = std::max(f.q_max_blocks, static_cast<int64_t>(f.q_blocks.back().size()));
  }
}

// Every rank's partition from its int8 blocks, its own included: all ranks then compute with the same weights.
void Stage3::dequantize_gathered(Flat& f, bool keep_group_slice) {
  const int64_t part = f.layout.partition_size();
  const int64_t blocks = f.q_max_blocks;
  for (int r = 0; r < world_.size(); ++r)
    dequantize_blocks(f.q_values.narrow(0, r * part, part), f.q_scales.narrow(0, r * blocks, blocks), f.q_blocks[r],
                      f.gathered.narrow(0, f.layout.begin(r), part));
  if (keep_group_slice) {
    // hpZ: the blocks of this rank's secondary slice (world partitions [h * w, (h + 1) * w), w = world / hpz_size),
    // in case the unit is released with a backward to follow (keep_secondary); release drops them otherwise.
    const int64_t w = world_.size() / options_.quantization.hpz_size, h = hpz_group_.rank();
    f.forward_q_values = f.q_values.narrow(0, h * w * part, w * part).clone();
    f.forward_q_scales = f.q_scales.narrow(0, h * w * blocks, w * blocks).clone();
  }
  f.q_values = at::Tensor();
  f.q_scales = at::Tensor();
}

void Stage3::release(Unit& unit) {
  if (unit.sharded() || unit.persistent) return;
  wait_gathered(unit);  // an in-flight gather must land before its buffer is reused
  for (auto& f : unit.flats) {
    f.forward_q_values = f.forward_q_scales = at::Tensor();  // kept by keep_secondary, if it was to be
    for (auto& p : f.params) p.set_data(at::empty({0}, f.full.options()));
    c10::StorageImpl* st = f.full.storage().unsafeGetStorageImpl();
    st->set_data_ptr_noswap(c10::DataPtr(nullptr, f.full.device()));
    st->set_nbytes(0);
    pool_.release(std::move(f.gathered));
    f.gathered = at::Tensor();
  }
  const bool secondary = !unit.flats.empty() && unit.flats.front().secondary.defined();
  unit.state = secondary ? Unit::State::kShardedPostForward : Unit::State::kSharded;
  if (!unit.root) note_live(-unit.numel);
}

// Keep `unit` gathered when the recorded order brings it back within stage3_max_reuse_distance elements of other
// units' fetches (and the live bound allows).
bool Stage3::keep_for_reuse(const Unit& unit) const {
  if (!coordinator_.following()) return false;
  int64_t between = 0;
  for (int id : coordinator_.upcoming(std::numeric_limits<size_t>::max())) {
    if (id == unit.id)
      return between < options_.prefetch.max_reuse_distance && stats_.live_elems <= options_.prefetch.max_live_elems;
    between += units_[id]->numel;
  }
  return false;
}

// Releases idle gathered units (kept for reuse or prefetched too early) until `elems` more fit under
// stage3_max_live_parameters. A unit that alone exceeds the bound is still gathered: it must run.
void Stage3::make_room(int64_t elems, const Unit& wanted) {
  for (auto& u : units_) {
    if (stats_.live_elems + elems <= options_.prefetch.max_live_elems) return;
    if (u.get() == &wanted || u->root || u->persistent || u->in_use) continue;
    if (!u->sharded()) release(*u);
  }
}

void Stage3::prefetch_after(const Unit& unit) {
  if (options_.prefetch.prefetch_bucket_elems <= 0 || !coordinator_.following()) return;
  int64_t issued = 0;
  // Not across the forward's end: the first units of backward are needed only after the loss and its gradient,
  // where activations peak, and a unit gathered for them early would be held through that peak.
  for (int id : coordinator_.upcoming(units_.size() * 2, /*within_forward=*/true)) {
    Unit& next = *units_[id];
    if (next.id == unit.id || !next.sharded()) continue;
    if (issued + next.numel > options_.prefetch.prefetch_bucket_elems) break;
    if (stats_.live_elems + next.numel > options_.prefetch.max_live_elems) break;
    gather_async(next, /*prefetch=*/true);
    issued += next.numel;
  }
}

void Stage3::fetch(Unit& unit) {
  coordinator_.on_fetch(unit.id);
  if (unit.sharded()) {
    make_room(unit.numel, unit);
    gather_async(unit, /*prefetch=*/false);
  }
  // Issue the next gathers before waiting, so they travel while this unit computes.
  prefetch_after(unit);
  wait_gathered(unit);
}

void Stage3::begin_forward() {
  coordinator_.begin_pass();
  Unit& root = *units_[root_];
  if (root.sharded()) gather_async(root, /*prefetch=*/false);
  wait_gathered(root);
}

void Stage3::end_forward() {
  // Without a backward to follow (evaluation, or no grad), nothing needs the root until the next forward.
  if (!at::GradMode::is_enabled()) {
    for (auto& u : units_)
      if (!u->persistent) release(*u);
    coordinator_.end_pass();
  }
  // The loss and its gradient come next, where activations peak; the forward's free buffers would sit idle
  // through it (backward takes new ones as its units come).
  pool_.free_idle();
}

void Stage3::unit_pre_forward(int id) {
  Unit& unit = *units_.at(id);
  unit.in_use = true;
  fetch(unit);
}

at::Tensor Stage3::unit_post_forward(int id, const at::Tensor& output) {
  Unit& unit = *units_.at(id);
  unit.in_use = false;
  const bool backward_follows = at::GradMode::is_enabled() && output.requires_grad();
  if (!backward_follows || !keep_for_reuse(unit)) {
    if (backward_follows && !in_backward_) keep_secondary(unit);
    release(unit);
  }
  return backward_follows ? attach_pre_backward(output, id) : output;
}

void Stage3::unit_pre_backward(int id) {
  Unit& unit = *units_.at(id);
  if (unit.awaiting_grads()) return;  // several outputs of one unit each carry the hook
  unit.in_use = true;
  fetch(unit);
  expect_grads(unit);  // its gradient buffer is taken when the first gradient arrives (arm_grads)
}

std::vector<int> Stage3::gather_for_access(const std::vector<at::Tensor>& params) {
  std::vector<int> ids;
  for (auto& unit : units_) {
    bool hit = false;
    for (const auto& f : unit->flats)
      for (const auto& p : f.params)
        for (const auto& q : params) hit = hit || p.is_same(q);
    if (!hit) continue;
    ids.push_back(unit->id);
    // A unit the schedule gathered through int8 (kept for reuse, or prefetched) is gathered again exactly: a scope
    // that reads the weights (a save) or writes them back must see the masters' values, not their quantization.
    if (unit->quantized && !unit->sharded() && !unit->in_use) release(*unit);
    if (unit->sharded()) gather_async(*unit, /*prefetch=*/false, /*exact=*/true);
  }
  for (int id : ids) wait_gathered(*units_[id]);
  return ids;
}

void Stage3::end_access(const std::vector<int>& ids, int modifier_rank) {
  at::NoGradGuard no_grad;
  for (int id : ids) {
    Unit& unit = *units_[id];
    if (modifier_rank >= 0) {
      DS_CHECK(!options_.offload.external_masters, "GatheredParameters: modifying parameters (modifier_rank ",
               modifier_rank,
               ") of a ZeRO-3 engine whose optimizer is offloaded to nvme is not supported: the "
               "masters live in the swap files; modify them before initialize (under zero::Init)");
      for (auto& f : unit.flats) {
        if (world_.size() > 1) world_.broadcast(f.full, modifier_rank);
        at::Tensor mine = f.full.narrow(0, f.layout.begin(f.layout.rank()), f.layout.partition_size());
        masters_[f.group].narrow(0, f.group_offset, f.layout.partition_size()).copy_(mine);
        if (separate_shards()) store_shard(f, mine);
      }
      drop_secondary(unit);  // the weights changed
    }
    if (!unit.persistent) release(unit);
  }
}

}  // namespace deepspeed::zero
