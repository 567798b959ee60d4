// Stage 3's glue to autograd and to the unit wrappers: the identity Function whose backward re-gathers a unit before
// its gradients are computed, the AccumulateGrad post-hooks that count a unit's gradients in, and the hooks object
// a UnitBase calls around its forward. Kept in one file because it alone needs LibTorch's autograd internals.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "deepspeed/error.h"
#include "zero/stage3/stage3.h"

namespace deepspeed::zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity in forward; in backward, tells stage 3 the unit's backward is about to run.
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t stage, int64_t id) {
    ctx->saved_data["stage"] = stage;
    ctx->saved_data["id"] = id;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* stage = reinterpret_cast<Stage3*>(ctx->saved_data["stage"].toInt());
    stage->unit_pre_backward(static_cast<int>(ctx->saved_data["id"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(Stage3* stage, int id) : stage_(stage), id_(id) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    stage_->param_grad_ready(id_);
    return outputs;
  }

 private:
  Stage3* stage_;
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
  return PreBackward::apply(output, reinterpret_cast<int64_t>(this), static_cast<int64_t>(id));
}

void Stage3::register_grad_hook(int id, const at::Tensor& param) {
  auto acc = torch::autograd::impl::grad_accumulator(param);
  DS_ASSERT(acc != nullptr, "zero stage 3: parameter without a gradient accumulator");
  hook_keys_.push_back(acc->add_post_hook(std::make_unique<GradReadyHook>(this, id)));
  accumulators_.push_back(std::move(acc));
}

void Stage3::remove_grad_hooks() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  accumulators_.clear();
  hook_keys_.clear();
}

}  // namespace deepspeed::zero
