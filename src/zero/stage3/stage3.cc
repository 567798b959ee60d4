// Stage3 construction (partitioning the model one unit at a time) and its memory accounting. The step-time
// schedule is in stage3_schedule.cc, gradients in stage3_grads.cc, the autograd glue in unit_autograd.cc.
#include "zero/stage3/stage3.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "comm/mesh.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "zero/stage3/construction_shard.h"
#include "zero/stage3/detach_storage.h"
#include "zero/stage3/heap_trim.h"
#include "zero/stage3/stage3_state.h"
#include "zero/stage3/working_set.h"

namespace deepspeed::zero {
namespace {

constexpr int64_t kAlignElems = kPartitionAlign;
int64_t align_up(int64_t n) { return (n + kAlignElems - 1) / kAlignElems * kAlignElems; }

}  // namespace

at::Tensor Stage3::Flat::shard(const Stage3& s) const {
  DS_ASSERT(swap_offset < 0, "a swapped partition has no shard in memory (use load_shard/store_shard)");
  if (!s.separate_shards()) return s.masters_[group].narrow(0, group_offset, layout.partition_size());
  return s.lowp_[group].narrow(0, group_offset - s.lowp_base_[group], layout.partition_size());
}

Stage3::Stage3(const std::shared_ptr<torch::nn::Module>& module, const std::vector<std::vector<at::Tensor>>& groups,
               comm::ProcessGroup world, Stage3Options options)
    : world_(std::move(world)), options_(options) {
  pool_.set_device(options_.device);
  form_groups();
  DS_CHECK(options_.prefetch.max_live_elems >= 0 && options_.prefetch.max_reuse_distance >= 0 &&
               options_.prefetch.prefetch_bucket_elems >= 0,
           "zero_optimization: stage3_max_live_parameters, stage3_max_reuse_distance and "
           "stage3_prefetch_bucket_size must be >= 0");
  const std::vector<int64_t> group_size = make_units(module, groups);
  lowp_base_.assign(groups.size(), 0);
  if (!options_.offload.param_swap_dir.empty()) setup_param_swap(group_size);
  allocate_group_buffers(group_size);
  // Index of every parameter in its group, for names in overflow messages.
  for (auto& unit : units_)
    for (auto& f : unit->flats)
      for (const auto& p : f.params)
        for (size_t i = 0; i < groups[f.group].size(); ++i)
          if (groups[f.group][i].is_same(p)) f.index_in_group.push_back(i);

  // Second pass, one unit at a time: fill the flat, take rank 0's values, keep this rank's partition, release.
  for (auto& unit : units_) build_unit(*unit);
  for (auto& unit : units_) {
    unit->num_params = 0;
    for (const auto& f : unit->flats) unit->num_params += static_cast<int>(f.params.size());
    unit->numel = 0;
    for (const auto& f : unit->flats) unit->numel += f.layout.padded_numel();
  }
  size_working_set_from_units();
  // The persistent unit stays gathered for good.
  gather_async(*units_[persistent_], /*prefetch=*/false);
  wait_gathered(*units_[persistent_]);
  release_freed_heap();  // what flattening and partitioning freed (heap_trim.h)
}

// The gathered and in-flight bounds from the model (working_set.h), said once at start-up where they cut the
// config's values; and the pool's cache limit from them.
void Stage3::size_working_set_from_units() {
  int64_t largest = 0, partitioned = 0, always = 0;
  for (const auto& unit : units_) {
    if (unit->persistent || unit->root) {
      always += unit->numel;
    } else {
      largest = std::max(largest, unit->numel);
      partitioned += unit->numel;
    }
  }
  const WorkingSet configured{options_.prefetch.max_live_elems, options_.reduction.reduce_bucket_elems};
  const WorkingSet sized = size_working_set(configured, largest, partitioned);
  if (comm::get_rank() == 0 &&
      (sized.max_live_elems < configured.max_live_elems || sized.reduce_bucket_elems < configured.reduce_bucket_elems))
    std::fprintf(stderr,
                 "deepspeed: zero stage 3 holds at most %lld gathered parameter elements and %lld gradient elements "
                 "in flight for this model (largest unit %lld of %lld partitioned; stage3_max_live_parameters %lld "
                 "and reduce_bucket_size %lld are upper bounds)\n",
                 static_cast<long long>(sized.max_live_elems), static_cast<long long>(sized.reduce_bucket_elems),
                 static_cast<long long>(largest), static_cast<long long>(partitioned),
                 static_cast<long long>(configured.max_live_elems),
                 static_cast<long long>(configured.reduce_bucket_elems));
  options_.prefetch.max_live_elems = sized.max_live_elems;
  options_.reduction.reduce_bucket_elems = sized.reduce_bucket_elems;
  // Free pool buffers stay only within what a step holds at once by these bounds (buffer_pool.h): the gathered
  // units, the gradient buffers in flight, and the units that are always gathered with their gradient buffers
  // (held over the whole backward). So a step reuses its buffers instead of allocating afresh, and a pass that once
  // gathered more (a checkpoint save) does not keep it.
  const int64_t elem = static_cast<int64_t>(
      std::max(c10::elementSize(options_.precision.dtype), c10::elementSize(options_.precision.comm_dtype)));
  const int64_t limit = sized.max_live_elems + sized.reduce_bucket_elems + 2 * always;
  if (limit < std::numeric_limits<int64_t>::max() / 16) pool_.set_cache_limit(limit * elem);
}

// The units (each a module's parameters, then the root unit's and the persistent unit's) and their flats' layouts;
// returns each group's size: this rank's partitions of every unit, where each sits in the group buffers.
std::vector<int64_t> Stage3::make_units(const std::shared_ptr<torch::nn::Module>& module,
                                        const std::vector<std::vector<at::Tensor>>& groups) {
  // Which unit owns each parameter; the first unit found (outermost) wins, nested units are refused.
  std::vector<std::shared_ptr<UnitBase>> modules = find_units(module);
  std::unordered_map<const void*, int> owner;
  for (size_t u = 0; u < modules.size(); ++u) {
    for (const auto& p : modules[u]->parameters(/*recurse=*/true)) {
      auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), static_cast<int>(u));
      DS_CHECK(fresh, "zero stage 3: unit ", u, " is nested inside unit ", it->second,
               " (or shares a parameter with it); nested units are not supported, shard the inner modules only");
    }
  }
  const int n_units = static_cast<int>(modules.size());
  root_ = n_units;
  persistent_ = n_units + 1;
  std::vector<std::vector<std::pair<size_t, at::Tensor>>> members(n_units + 2);
  std::unordered_map<const void*, int64_t> numel_of;  // whole sizes, also of parameters partitioned at construction
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g]) {
      auto it = owner.find(p.unsafeGetTensorImpl());
      int u = it == owner.end() ? root_ : it->second;
      int64_t numel = p.numel();
      if (it != owner.end())
        if (auto* cs = dynamic_cast<ConstructionShard*>(modules[u]->hooks().get())) numel = cs->numel_of(p);
      numel_of[p.unsafeGetTensorImpl()] = numel;
      if (numel < options_.prefetch.persistence_threshold) u = persistent_;
      members[u].push_back({g, p});
    }
  }
  for (int u = 0; u < n_units + 2; ++u) {
    auto unit = std::make_unique<Unit>();
    unit->id = u;
    unit->root = u == root_;
    unit->persistent = u == persistent_;
    unit->name = u < n_units ? "unit " + std::to_string(u) : unit->root ? "root unit" : "persistent unit";
    if (u < n_units) unit->module = modules[u];
    units_.push_back(std::move(unit));
  }

  // Layouts and where each rank's partitions sit in the group buffers.
  const int n = world_.size(), rank = world_.rank();
  std::vector<int64_t> group_size(groups.size(), 0);
  for (int u = 0; u < n_units + 2; ++u) {
    Unit& unit = *units_[u];
    for (size_t g = 0; g < groups.size(); ++g) {
      Flat f;
      f.group = g;
      int64_t total = 0;
      for (size_t i = 0; i < members[u].size(); ++i) {
        if (members[u][i].first != g) continue;
        const at::Tensor& p = members[u][i].second;
        f.params.push_back(p);
        f.offsets.push_back(total);
        f.numels.push_back(numel_of[p.unsafeGetTensorImpl()]);
        total = align_up(total + f.numels.back());
      }
      if (f.params.empty()) continue;
      f.layout = PartitionLayout(total, n, rank);
      f.group_offset = group_size[g];
      group_size[g] += f.layout.partition_size();
      unit.flats.push_back(std::move(f));
    }
  }
  return group_size;
}

// hpZ's secondary groups and two-level qgZ's node and cross-node groups: grids over the world (comm/mesh.h), which
// runtime::check_degrees (hpZ) and make_stage (qgZ's hosts) made sure is this stage's data-parallel group.
void Stage3::form_groups() {
  const bool two_level_qgz = options_.quantization.quantized_gradients && options_.quantization.ranks_per_node > 1 &&
                             options_.quantization.ranks_per_node < world_.size() &&
                             world_.size() % options_.quantization.ranks_per_node == 0;
  if (options_.quantization.hpz_size <= 1 && !two_level_qgz) return;
  DS_CHECK(world_.size() == comm::get_world_size(), "ZeRO++'s hpZ and host groups are laid out over the whole world");
  if (options_.quantization.hpz_size > 1)
    hpz_group_ = comm::grid_groups("zero.hpz", "zero_optimization.zero_hpz_partition_size",
                                   options_.quantization.hpz_size)
                     .inner;
  if (two_level_qgz) {
    const int l = options_.quantization.ranks_per_node;
    nodes_ = world_.size() / l;
    const comm::GridGroups hosts = comm::grid_groups("zero.qgz_hosts", "zero_quantized_gradients ranks per host", l);
    node_group_ = hosts.inner;
    cross_node_group_ = hosts.outer;
  }
}

// Each group's masters, gradients, separate model-dtype shards and host gradient copies, `group_size[g]` elements
// (this rank's partitions of every unit).
void Stage3::allocate_group_buffers(const std::vector<int64_t>& group_size) {
  auto& acc = accelerator::get_accelerator();
  auto host = [&](at::Tensor t) {
    return options_.offload.offload_to_host && options_.offload.pin_memory ? acc.pin_memory(t) : t;
  };
  const auto on_device = at::TensorOptions().device(options_.device);
  const auto on_host = at::TensorOptions().device(at::kCPU);
  // fp32 masters live with the optimizer: in host memory when it is offloaded, else on the device.
  const auto master_place = options_.offload.offload_to_host ? on_host : on_device;
  // Model-dtype shards on the device, or in host memory with offload_param "cpu".
  auto shard_buffer = [&](int64_t n) {
    if (!shards_on_host()) return at::zeros({n}, on_device.dtype(options_.precision.dtype));
    at::Tensor t = at::zeros({n}, on_host.dtype(options_.precision.dtype));
    return options_.offload.param_pin_memory ? acc.pin_memory(t) : t;
  };
  for (size_t g = 0; g < group_size.size(); ++g) {
    masters_.push_back(
        host(at::zeros({options_.offload.external_masters ? 0 : group_size[g]}, master_place.dtype(master_dtype()))));
    grads_.push_back(at::zeros({group_size[g]}, on_device.dtype(options_.precision.grad_dtype)));
    lowp_.push_back(separate_shards() ? shard_buffer(group_size[g] - lowp_base_[g]) : at::Tensor());
    // The host copy of the gradients: fp32 for fp32 masters, the model's dtype beside masters in it.
    if (options_.offload.offload_to_host)
      host_grads_.push_back(host(at::zeros({group_size[g]}, at::dtype(master_dtype()))));
  }
}

void Stage3::build_unit(Unit& unit) {
  if (unit.module)
    if (auto* cs = dynamic_cast<ConstructionShard*>(unit.module->hooks().get())) cs->materialize();
  at::NoGradGuard no_grad;
  for (auto& f : unit.flats) {
    f.full = at::zeros({f.layout.padded_numel()},
                       at::TensorOptions().dtype(options_.precision.dtype).device(options_.device));
    for (size_t i = 0; i < f.params.size(); ++i) {
      const at::Tensor& p = f.params[i];
      DS_CHECK(p.is_floating_point(), "zero stage 3: parameter ", f.index_in_group[i], " of group ", f.group,
               " is not floating point (", p.scalar_type(), ")");
      f.shapes.push_back(p.sizes().vec());
      f.full.narrow(0, f.offsets[i], p.numel()).copy_(p.reshape({-1}));
    }
    if (world_.size() > 1) world_.broadcast(f.full, /*src=*/world_.ranks()[0]);
    at::Tensor mine = f.full.narrow(0, f.layout.begin(f.layout.rank()), f.layout.partition_size());
    if (!options_.offload.external_masters)
      masters_[f.group].narrow(0, f.group_offset, f.layout.partition_size()).copy_(mine);
    if (separate_shards()) store_shard(f, mine);
    // Gradient hooks are registered while the parameters have their full shape and final dtype: autograd's
    // accumulator records them when it is created. Then the original memory goes; the parameters point at nothing
    // until gathered.
    for (size_t i = 0; i < f.params.size(); ++i) {
      f.params[i].set_data(f.full.narrow(0, f.offsets[i], f.numels[i]).view(f.shapes[i]));
      register_grad_hook(unit.id, f.params[i]);
      f.params[i].set_data(at::empty({0}, f.full.options()));
    }
    detach_storage(f.full);
  }
  if (unit.module) unit.module->set_hooks(make_unit_hooks(unit.id));
}

Stage3::~Stage3() {
  self_ref_.reset();
  // Waits for what is in flight; units go back to pass-through (their parameters stay as they are), even when a
  // wait failed: their hooks point here.
  try {
    drain_reductions(0);
    for (auto& unit : units_)
      if (unit->state == Unit::State::kGathering) wait_gathered(*unit);
    // Copies still reading the gradient partitions or host shards about to be freed.
    grad_copies_.wait();
    if (copy_stream_) copy_stream_->synchronize();
  } catch (...) {
  }
  for (auto& unit : units_)
    if (unit->module) unit->module->set_hooks(nullptr);
  remove_grad_hooks();
  remove_param_swap();
}

int64_t Stage3::param_bytes() const {
  int64_t bytes = 0;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(options_.precision.dtype));
  for (const auto& m : shard_buffers()) bytes += m.numel() * elem;
  for (const auto& f : units_[persistent_]->flats) bytes += f.layout.padded_numel() * elem;
  return bytes;
}

int64_t Stage3::master_copy_bytes() const {
  if (!separate_shards()) return 0;
  int64_t bytes = 0;
  for (const auto& m : masters_) bytes += static_cast<int64_t>(m.nbytes());
  return bytes;
}

at::Tensor Stage3::initial_master(size_t group) const {
  // In host memory: the optimizer swapper writes it to its files.
  if (!param_io_) return lowp_.at(group).to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  // offload_param nvme: the swapped partitions come from this rank's swap file, one flat at a time.
  at::Tensor master = at::empty({lowp_base_.at(group) + lowp_.at(group).numel()}, at::kFloat);
  for (const auto& unit : units_)
    for (const auto& f : unit->flats) {
      if (f.group != group) continue;
      at::Tensor shard = at::empty({f.layout.partition_size()}, at::TensorOptions().dtype(options_.precision.dtype));
      const_cast<Stage3*>(this)->load_shard(f, shard);
      master.narrow(0, f.group_offset, shard.numel()).copy_(shard);
    }
  return master;
}

void Stage3::write_slice(size_t group, int64_t offset, const at::Tensor& master) {
  at::NoGradGuard no_grad;
  wait_host_reads();
  if (!param_io_) {
    lowp_.at(group).narrow(0, offset, master.numel()).copy_(master);
    return;
  }
  // offload_param nvme: each flat the slice touches takes its part; a swapped flat only partly covered is read,
  // patched and written back whole (its file extent is written in aligned units).
  const int64_t end = offset + master.numel();
  for (const auto& unit : units_)
    for (const auto& f : unit->flats) {
      const int64_t part = f.layout.partition_size();
      const int64_t lo = std::max(offset, f.group_offset), hi = std::min(end, f.group_offset + part);
      if (f.group != group || lo >= hi) continue;
      at::Tensor values = master.narrow(0, lo - offset, hi - lo);
      if (f.swap_offset < 0) {
        lowp_[group].narrow(0, lo - lowp_base_[group], hi - lo).copy_(values);
      } else if (hi - lo == part) {
        store_shard(f, values);
      } else {
        at::Tensor shard = at::empty({part}, at::TensorOptions().dtype(options_.precision.dtype));
        load_shard(f, shard);
        shard.narrow(0, lo - f.group_offset, hi - lo).copy_(values);
        store_shard(f, shard);
      }
    }
}

at::Tensor Stage3::copy_back_slice(size_t group, int64_t offset, int64_t n) const {
  const at::Tensor& shard = lowp_.at(group);
  if ((options_.precision.dtype != at::kBFloat16 && options_.precision.dtype != at::kHalf) || !shard.device().is_cpu())
    return at::Tensor();
  // With offload_param nvme only the persistent tail is in memory; other slices go through write_slice.
  if (offset < lowp_base_.at(group)) return at::Tensor();
  wait_host_reads();  // the optimizer's kernel writes into it next
  return shard.narrow(0, offset - lowp_base_.at(group), n);
}

int64_t Stage3::host_grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& g : host_grads_) bytes += static_cast<int64_t>(g.nbytes());
  return bytes;
}

std::vector<at::Tensor> Stage3::step_grads() {
  if (!options_.offload.offload_to_host) return grads_;
  if (!options_.offload.early_host_grads) {
    for (size_t g = 0; g < grads_.size(); ++g) host_grads_[g].copy_(grads_[g]);
    return host_grads_;
  }
  // The partitions the boundary backward copied already (their copies finish here); the rest now.
  grad_copies_.wait();
  for (auto& unit : units_)
    for (auto& f : unit->flats) {
      if (!f.host_copied) {
        const int64_t part = f.layout.partition_size();
        host_grads_[f.group].narrow(0, f.group_offset, part).copy_(grads_[f.group].narrow(0, f.group_offset, part));
      }
      f.host_copied = false;
    }
  return host_grads_;
}

int64_t Stage3::grad_bytes() const {
  int64_t bytes = 0;
  for (const auto& g : grads_) bytes += static_cast<int64_t>(g.nbytes());
  return bytes;
}

int64_t Stage3::working_bytes() const {
  int64_t bytes = pool_.bytes_in_use();
  for (const auto& unit : units_)
    for (const auto& f : unit->flats)
      for (const at::Tensor* t : {&f.secondary, &f.secondary_scales, &f.forward_q_values, &f.forward_q_scales})
        if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

StageBytes Stage3::bytes() const {
  StageBytes b;
  b.params = param_bytes();
  b.gradients = grad_bytes();
  b.master_copies = master_copy_bytes();
  b.working = working_bytes();
  b.host_grads = host_grad_bytes();
  b.offloaded = options_.offload.offload_to_host;
  if (options_.offload.params_on_host)
    for (const auto& s : shard_buffers()) b.host_params += static_cast<int64_t>(s.nbytes());
  return b;
}

StageStates Stage3::states() const {
  // The caller may move or free what it gets: the early gradient copies down must have read it first.
  grad_copies_.wait();
  StageStates s;
  s.hp_params = masters_;
  s.lp_params = shard_buffers();
  s.lp_grads = grads_;
  return s;
}

Stage3Stats Stage3::stats() const {
  waits_.resolve();
  Stage3Stats s = stats_;
  s.trace_invalidations = coordinator_.invalidations();
  s.pool_allocations = pool_.allocations();
  s.pool_peak_bytes = pool_.peak_bytes_in_use();
  s.pool_reserved_bytes = pool_.bytes_reserved();
  return s;
}

void Stage3::reset_peaks() {
  stats_.peak_live_elems = stats_.live_elems;
  pool_.reset_peak();
}

}  // namespace deepspeed::zero
