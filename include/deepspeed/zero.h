// ZeRO stage 3's model-side API: units, per-unit construction and gathered-parameter scopes.
//
// A unit is a submodule whose parameters live partitioned across the data-parallel ranks (1/N of a flat buffer per
// rank) and are gathered only while the unit runs (ARCHITECTURE.md "ZeRO-3 units, not global hooks"). A model marks
// its units by wrapping submodules and calling the wrapper instead of the submodule:
//
//   blocks->push_back(deepspeed::zero::shard(Block(cfg)));              // wrap an existing module
//   blocks->push_back(deepspeed::zero::shard([&] { return Block(cfg); })); // build it; partition at once
//   ...
//   x = blocks[i]->as<deepspeed::zero::ShardedImpl<BlockImpl>>()->forward(x);
//
// The wrapper adopts the wrapped module's parameters, buffers and children under their own names, so a model's
// state_dict keys are the same with and without units. At ZeRO stages 0-2 a unit is a plain pass-through; at stage
// 3 the engine attaches to it: forward gathers the unit's parameters, runs it and releases them; backward re-gathers
// before the unit's gradients are computed and reduce-scatters them to their owners after. Parameters outside any
// unit form the engine's root unit, gathered for the whole step.
//
// Per-unit construction (DeepSpeed's zero.Init): while a zero::Init scope is alive, zero::shard(factory) builds each
// unit, broadcasts rank 0's initial values, keeps this rank's partition and frees the full tensors at once, so no rank
// ever holds more than one unit whole while the model is built.
//
// Thread-safety: like the Engine, driven from one thread in the same order on every rank.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::zero {

namespace detail {
// What an attached stage-3 runtime (or a construction-time partition) does around a unit's forward. Implemented in
// src/zero/stage3; the public wrapper only calls through it.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void pre_forward() = 0;
  virtual at::Tensor post_forward(const at::Tensor& output) = 0;
};
}  // namespace detail

// The non-template part of every unit wrapper.
class UnitBase : public torch::nn::Module {
 public:
  // Set by the engine (stage 3) or by zero::Init; null means pass-through.
  void set_hooks(std::shared_ptr<detail::UnitHooks> hooks) { hooks_ = std::move(hooks); }
  const std::shared_ptr<detail::UnitHooks>& hooks() const { return hooks_; }
  // The wrapped module.
  virtual std::shared_ptr<torch::nn::Module> wrapped() const = 0;

 protected:
  // Registers `inner`'s own parameters, buffers and children on this wrapper under the same names.
  void adopt(const std::shared_ptr<torch::nn::Module>& inner);
  void pre_forward() {
    if (hooks_) hooks_->pre_forward();
  }
  at::Tensor post_forward(const at::Tensor& output) { return hooks_ ? hooks_->post_forward(output) : output; }

 private:
  std::shared_ptr<detail::UnitHooks> hooks_;
};

// Partitions `unit` now when a zero::Init scope is active on this thread (otherwise does nothing).
void partition_at_construction(UnitBase& unit);

template <typename M>
class ShardedImpl : public UnitBase {
 public:
  explicit ShardedImpl(std::shared_ptr<M> inner) : inner_(std::move(inner)) { adopt(inner_); }

  template <typename... Args>
  at::Tensor forward(Args&&... args) {
    pre_forward();
    at::Tensor out = inner_->forward(std::forward<Args>(args)...);
    return post_forward(out);
  }

  void train(bool on = true) override {
    torch::nn::Module::train(on);
    inner_->train(on);  // the wrapped module is not a registered child, so its own flag is set here
  }

  M& module() { return *inner_; }
  std::shared_ptr<torch::nn::Module> wrapped() const override { return inner_; }

 private:
  std::shared_ptr<M> inner_;
};

// Wraps an existing module (a shared_ptr or a TORCH_MODULE holder) as a unit.
template <typename M>
std::shared_ptr<ShardedImpl<M>> shard(std::shared_ptr<M> module) {
  return std::make_shared<ShardedImpl<M>>(std::move(module));
}
template <typename M>
std::shared_ptr<ShardedImpl<M>> shard(torch::nn::ModuleHolder<M> module) {
  return std::make_shared<ShardedImpl<M>>(module.ptr());
}
// Builds a unit with `factory` (returning a holder or shared_ptr) and, inside a zero::Init scope, partitions it at
// once.
// (A TORCH_MODULE holder is callable too; it is a module, not a factory. std::conjunction stops before asking
// whether a holder is invocable, which would instantiate its forward().)
template <typename F,
          typename = std::enable_if_t<std::conjunction_v<
              std::negation<std::is_base_of<torch::detail::ModuleHolderIndicator, std::decay_t<F>>>,
              std::is_invocable<F>>>>
auto shard(F&& factory) {
  auto unit = shard(factory());
  partition_at_construction(*unit);
  return unit;
}

// DeepSpeed's zero.Init: while alive, zero::shard(factory) partitions each unit as it is built. Enabled only when
// the config selects stage 3 (or `enabled` is true); starts the communication layer if needed. With the config's
// offload_param (cpu or nvme) the partitions go to host memory (pinned with its pin_memory), as DeepSpeed's
// remote_device "cpu"; else to the accelerator's device.
class Init {
 public:
  explicit Init(const Config& config);
  explicit Init(bool enabled = true);
  ~Init();
  Init(const Init&) = delete;
  Init& operator=(const Init&) = delete;

 private:
  bool enabled_ = false;
  bool previous_ = false;
  bool previous_host_ = false, previous_pin_ = false;  // the enclosing scope's partition placement
};

// DeepSpeed's GatheredParameters: from construction to release(), the units owning `params` are gathered, so their
// full values can be read (every rank) or modified. Outside stage 3 (no partitioned units) it does nothing.
// Collective: every rank must construct it.
//
// Read-only (modifier_rank -1): changes are discarded; release() or the destructor frees the gathered values, with no
// communication.
// Modifying (modifier_rank >= 0): call release() at the end of the scope, on every rank: it broadcasts the values that
// rank holds and partitions them back (into the optimizer's fp32 masters too when an engine owns them). A scope left
// without release() (an exception, or a forgotten call) runs no collective from the destructor: the changes are
// dropped on this rank and a line on stderr says so, so an exception on one rank ends that rank (and, through the
// launcher, the job) instead of leaving the others in a broadcast or terminating inside a destructor. (Parameters
// kept whole by stage3_param_persistence_threshold keep such a dropped change locally until the next optimizer step
// re-gathers them.)
class GatheredParameters {
 public:
  GatheredParameters(const std::vector<at::Tensor>& params, int modifier_rank = -1, bool enabled = true);
  GatheredParameters(const torch::nn::Module& module, int modifier_rank = -1, bool enabled = true);
  ~GatheredParameters();
  // Ends the scope (see above); collective when modifier_rank >= 0. Later calls do nothing.
  void release();
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Stage 3 counters (Engine::stage3_stats()), for tests and the benchmark (elements are parameter elements, bytes in the model's dtype).
struct Stage3Stats {
  int64_t gathers = 0;              // unit gathers issued (on demand + prefetch)
  int64_t prefetches = 0;           // of which issued ahead of use
  int64_t secondary_gathers = 0;    // of which served by hpZ's secondary partitions (zero_hpz_partition_size ranks)
  int64_t trace_invalidations = 0;  // passes whose fetch order diverged from the recorded one
  int64_t live_elems = 0;           // gathered now, excluding the root and persistent units
  int64_t peak_live_elems = 0;
  int64_t pool_allocations = 0;
  int64_t pool_peak_bytes = 0;
  int64_t pool_reserved_bytes = 0;  // held by the pool now, free buffers included (within stage3_max_live_parameters)
  int64_t peak_pending_reduce_elems = 0;  // gradient elements being reduced at once (bounded by reduce_bucket_size)
  // Wall time (ms, cumulative) the training thread spent blocked: issuing and waiting for gathers of units needed
  // now (not prefetched), waiting for gathers issued ahead of use (what prefetching did not hide), and waiting for
  // gradient reductions.
  double gather_ms = 0;
  double prefetch_wait_ms = 0;
  double reduce_wait_ms = 0;  // at every stage (stages 0-2: backward kept waiting by the bucket reducer)
  // offload_optimizer "cpu": gradient elements copied to host memory during boundary backwards, as each partition's
  // (stages 1 and 2: each bucket's; stage 1's complete as backward finishes) reduction ended (the rest go at the
  // step). Counted at stages 1 and 2 too.
  int64_t host_grad_copies_in_backward = 0;
  // offload_optimizer.super_offload: partition slices the CPU optimizer updated during backward, and the steps whose
  // speculation was rolled back (skipped for an overflow, or redone because clipping bound).
  int64_t speculative_slices = 0;
  int64_t speculative_rollbacks = 0;
  // The OpenMP threads its worker's kernels ran with (offload_optimizer.cpuadam_cores_perc of the training thread's
  // count at initialize); 0 before its first update.
  int speculative_worker_threads = 0;
};

// Every unit wrapper under `module` (itself included), in module order.
std::vector<std::shared_ptr<UnitBase>> find_units(const std::shared_ptr<torch::nn::Module>& module);

}  // namespace deepspeed::zero
