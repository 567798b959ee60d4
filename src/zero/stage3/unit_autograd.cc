// Stage 3's glue to autograd and to the unit wrappers: the hook on a unit's output that re-gathers the unit before
// its gradients are computed, the AccumulateGrad post-hooks that count a unit's gradients in, and the hooks object
// a UnitBase calls around its forward. Kept in one file because it alone needs LibTorch's autograd internals.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "deepspeed/error.h"
#include "zero/stage3/param_owner.h"
#include "zero/stage3/stage3.h"

namespace deepspeed::zero {
namespace {

using torch::autograd::variable_list;

// Counts a parameter's gradient in when its accumulator has run; also the parameter's record of its owner
// (param_owner). The stage removes these hooks before it is destroyed, so the lock fails only in between.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::weak_ptr<Stage3*> stage, int id) : stage_(std::move(stage)), id_(id) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    std::shared_ptr<Stage3*> live = stage_.lock();
    DS_CHECK(live != nullptr, "zero stage 3: a gradient arrived for a parameter whose engine is being destroyed");
    (*live)->param_grad_ready(id_);
    return outputs;
  }
  std::shared_ptr<Stage3*> owner() const { return stage_.lock(); }

 private:
  std::weak_ptr<Stage3*> stage_;
  int id_;
};

class UnitHooksImpl : public detail::UnitHooks {
 public:
  UnitHooksImpl(Stage3* stage, int id) : stage_(stage), id_(id) {}
  void pre_forward() override { stage_->unit_pre_forward(id_); }
  at::Tensor post_forward(const at::Tensor& output) override { return stage_->unit_post_forward(id_, output); }

 private:
  Stage3* stage_;
  int id_;
};

}  // namespace

std::shared_ptr<detail::UnitHooks> Stage3::make_unit_hooks(int id) {
  return std::make_shared<UnitHooksImpl>(this, id);
}

at::Tensor Stage3::attach_pre_backward(const at::Tensor& output, int id) {
  // A hook on the output runs once its gradient is complete, just before the unit's own backward: the moment to
  // gather the unit again. The graph may outlive the engine, so the hook holds the stage weakly.
  std::weak_ptr<Stage3*> stage = self_ref_;
  output.register_hook([stage, id](const at::Tensor&) {
    std::shared_ptr<Stage3*> live = stage.lock();
    DS_CHECK(live != nullptr, "zero stage 3: backward reached a unit whose engine has been destroyed; keep the "
             "engine alive until the backward of its last forward has run");
    (*live)->unit_pre_backward(id);
  });
  return output;
}

void Stage3::register_grad_hook(int id, const at::Tensor& param) {
  auto acc = torch::autograd::impl::grad_accumulator(param);
  DS_ASSERT(acc != nullptr, "zero stage 3: parameter without a gradient accumulator");
  hook_keys_.push_back(acc->add_post_hook(std::make_unique<GradReadyHook>(self_ref_, id)));
  accumulators_.push_back(std::move(acc));
}

void Stage3::remove_grad_hooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  accumulators_.clear();
  hook_keys_.clear();
}

std::shared_ptr<Stage3*> param_owner(const at::Tensor& param) {
  if (!param.defined() || !param.requires_grad()) return nullptr;
  auto acc = torch::autograd::impl::try_get_grad_accumulator(param);
  if (!acc) return nullptr;
  for (const auto& hook : acc->post_hooks())
    if (const auto* ready = dynamic_cast<const GradReadyHook*>(hook.get()))
      if (auto owner = ready->owner()) return owner;
  return nullptr;
}

}  // namespace deepspeed::zero
