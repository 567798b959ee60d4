// The public side of include/deepspeed/zero.h: unit wrappers' adoption of the wrapped module, unit discovery,
// zero::Init and GatheredParameters (which find the stage-3 runtime that owns a parameter through the parameter's
// owner tag, and construction-time partitions through the module tree).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "deepspeed/error.h"
#include "deepspeed/zero.h"
#include "zero/stage3/heap_trim.h"
#include "zero/stage3/construction_shard.h"
#include "zero/stage3/param_owner.h"
#include "zero/stage3/stage3.h"

namespace deepspeed::zero {
namespace {

thread_local bool g_init_active = false;
thread_local ConstructionPlace g_init_place;

}  // namespace

void UnitBase::adopt(const std::shared_ptr<torch::nn::Module>& inner) {
  DS_CHECK(inner != nullptr, "zero::shard: module is null");
  for (const auto& item : inner->named_parameters(/*recurse=*/false)) register_parameter(item.key(), item.value());
  for (const auto& item : inner->named_buffers(/*recurse=*/false)) register_buffer(item.key(), item.value());
  for (const auto& item : inner->named_children()) register_module(item.key(), item.value());
}

std::vector<std::shared_ptr<UnitBase>> find_units(const std::shared_ptr<torch::nn::Module>& module) {
  std::vector<std::shared_ptr<UnitBase>> units;
  if (auto self = std::dynamic_pointer_cast<UnitBase>(module)) units.push_back(self);
  for (const auto& m : module->modules(/*include_self=*/false))
    if (auto u = std::dynamic_pointer_cast<UnitBase>(m)) units.push_back(u);
  return units;
}

void partition_at_construction(UnitBase& unit) {
  if (g_init_active) ConstructionShard::partition(unit, g_init_place);
}

void materialize_construction_shards(const std::shared_ptr<torch::nn::Module>& module) {
  for (const auto& unit : find_units(module)) {
    if (auto* cs = dynamic_cast<ConstructionShard*>(unit->hooks().get())) {
      cs->materialize();
      unit->set_hooks(nullptr);
    }
  }
}

std::unordered_map<const void*, std::vector<int64_t>> construction_shapes(
    const std::shared_ptr<torch::nn::Module>& module) {
  std::unordered_map<const void*, std::vector<int64_t>> out;
  for (const auto& unit : find_units(module))
    if (auto* cs = dynamic_cast<ConstructionShard*>(unit->hooks().get())) cs->add_shapes(out);
  return out;
}

Init::Init(const Config& config) : Init(config.zero.stage == 3) {
  // Under offload_param the partitions are built where the engine will keep them (nvme: in host memory until the
  // engine writes them to its swap file).
  const auto& op = config.zero.offload_param;
  g_init_place.host = enabled_ && op.enabled();
  g_init_place.pin = g_init_place.host && op.pin_memory;
}

Init::Init(bool enabled) : enabled_(enabled), previous_(g_init_active) {
  if (enabled_ && !comm::is_initialized()) comm::init_distributed();
  previous_host_ = g_init_place.host;
  previous_pin_ = g_init_place.pin;
  g_init_active = enabled_;
  g_init_place = ConstructionPlace{};
}

Init::~Init() {
  g_init_active = previous_;
  g_init_place.host = previous_host_;
  g_init_place.pin = previous_pin_;
  if (enabled_) release_freed_heap();  // the whole parameters built and cut to shards (heap_trim.h)
}

class GatheredParameters::Impl {
 public:
  std::vector<at::Tensor> params;
  int modifier_rank = -1;
  // Held weakly: an engine destroyed inside the scope is reported at release instead of used after free.
  std::vector<std::pair<std::weak_ptr<Stage3*>, std::vector<int>>> gathered;
  std::vector<ConstructionShard*> shards;
  bool released = false;

  // Frees the gathered values; `modifier_rank` -1 drops changes without any communication.
  void finish(int modifier) {
    released = true;
    for (auto& [stage, ids] : gathered) {
      std::shared_ptr<Stage3*> live = stage.lock();
      DS_CHECK(live != nullptr, "GatheredParameters: the engine owning the gathered parameters was destroyed inside "
               "the scope; release() (or end the scope) before destroying it");
      (*live)->end_access(ids, modifier);
    }
    for (ConstructionShard* cs : shards) cs->scatter(modifier);
  }
};

GatheredParameters::GatheredParameters(const std::vector<at::Tensor>& params, int modifier_rank, bool enabled)
    : impl_(std::make_unique<Impl>()) {
  if (!enabled) return;
  DS_CHECK(modifier_rank >= -1, "GatheredParameters: modifier_rank must be >= 0 (or -1 for none), got ",
           modifier_rank);
  impl_->params = params;
  impl_->modifier_rank = modifier_rank;
  // The owning stages in the order their parameters first appear: the same on every rank, so their gathers (which
  // are collective) match.
  std::vector<std::shared_ptr<Stage3*>> stages;
  for (const at::Tensor& p : params) {
    std::shared_ptr<Stage3*> owner = param_owner(p);
    if (owner && std::find(stages.begin(), stages.end(), owner) == stages.end()) stages.push_back(std::move(owner));
  }
  for (auto& s : stages) {
    std::vector<int> ids = (*s)->gather_for_access(params);
    if (!ids.empty()) impl_->gathered.push_back({s, std::move(ids)});
  }
}

GatheredParameters::GatheredParameters(const torch::nn::Module& module, int modifier_rank, bool enabled)
    : impl_(std::make_unique<Impl>()) {
  if (!enabled) return;
  std::vector<at::Tensor> params = module.parameters(/*recurse=*/true);
  // Units partitioned at construction (no engine yet) are found through the module tree itself.
  std::vector<std::shared_ptr<torch::nn::Module>> tree = module.modules(/*include_self=*/false);
  std::vector<UnitBase*> units;
  if (auto* self = dynamic_cast<const UnitBase*>(&module)) units.push_back(const_cast<UnitBase*>(self));
  for (const auto& m : tree)
    if (auto* u = dynamic_cast<UnitBase*>(m.get())) units.push_back(u);
  for (UnitBase* u : units) {
    if (auto* cs = dynamic_cast<ConstructionShard*>(u->hooks().get())) {
      cs->gather();
      impl_->shards.push_back(cs);
    }
  }
  GatheredParameters inner(params, modifier_rank, enabled);
  std::swap(impl_->gathered, inner.impl_->gathered);
  impl_->params = std::move(params);
  impl_->modifier_rank = modifier_rank;
}

void GatheredParameters::release() {
  if (!impl_ || impl_->released) return;
  impl_->finish(impl_->modifier_rank);
}

GatheredParameters::~GatheredParameters() {
  if (!impl_ || impl_->released) return;
  const bool modifying = impl_->modifier_rank >= 0 && !(impl_->gathered.empty() && impl_->shards.empty());
  if (modifying) {
    std::fprintf(stderr,
                 "deepspeed: GatheredParameters(modifier_rank=%d) ended without release()%s: the changes are "
                 "dropped on this rank (call release() at the end of the scope, on every rank)\n",
                 impl_->modifier_rank, std::uncaught_exceptions() > 0 ? " (an exception left the scope)" : "");
  }
  try {
    impl_->finish(/*modifier=*/-1);  // local only: no collective from a destructor
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepspeed: GatheredParameters: releasing the gathered parameters failed: %s\n", e.what());
  }
}

}  // namespace deepspeed::zero
