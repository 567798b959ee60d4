// SpeculativeUpdate: the OptimizerStep of offload_optimizer.super_offload (optimizer_step.h). The CPU step of each
// partition starts on a worker as the stage reports its final gradient during the window's last backward
// (runtime/speculative_step.h); at the step, it stands unless the step is skipped, clipping binds or the norm is not
// finite, in which case it is undone and the inner (resident) step takes the step as without speculation.
#include <cmath>
#include <memory>
#include <utility>

#include "deepspeed/error.h"
#include "runtime/optimizer_step.h"
#include "runtime/speculative_step.h"
#include "zero/stage_features.h"

namespace deepspeed::runtime {
namespace {

class SpeculativeUpdate final : public OptimizerStep {
 public:
  SpeculativeUpdate(std::unique_ptr<OptimizerStep> inner, std::unique_ptr<SpeculativeStep> speculation,
                    zero::Stage& stage)
      : inner_(std::move(inner)), speculation_(std::move(speculation)), stage_(stage) {}

  void run(std::vector<at::Tensor> grads, double coef) override { inner_->run(std::move(grads), coef); }
  bool land() override { return inner_->land(); }
  bool pending() const override { return inner_->pending(); }
  MasterState checkpoint_state() override { return inner_->checkpoint_state(); }
  void commit_checkpoint_state(const MasterState& state) override { inner_->commit_checkpoint_state(state); }
  int64_t resident_state_bytes() const override { return inner_->resident_state_bytes(); }

  void begin_window_backward(double unscale) override {
    // A second backward before step(): its gradients would add to what was speculated on.
    DS_CHECK(!speculation_->pending(), "backward: offload_optimizer.super_offload speculates on the backward that "
             "ends the accumulation window; call step() before another backward");
    speculation_->begin(unscale);
  }
  // No half-speculated step is left for the next step() to accept.
  void abandon_started() noexcept override { speculation_->abandon(); }
  void finish_started() override {
    if (!speculation_->pending()) return;
    try {
      speculation_->wait();
    } catch (...) {
      speculation_->abandon();
      throw;
    }
  }
  void skip_started() override {
    if (speculation_->pending()) speculation_->rollback();
  }
  bool accept_started(double coef, double unscale, double grad_norm) override {
    if (!speculation_->pending()) return false;
    // The speculative updates used `unscale` alone: they stand unless clipping binds (or the norm is not finite and
    // a rollback is possible).
    if (coef == unscale && (std::isfinite(grad_norm) || !speculation_->may_roll_back())) {
      speculation_->accept();
      stage_.publish();
      return true;
    }
    speculation_->rollback();
    return false;
  }
  void check_nothing_started(const char* what) const override {
    // The speculative step started in the last backward is still open (its worker may be writing the masters) until
    // step() validates it.
    DS_CHECK(!speculation_->pending(), what, ": the backward that ends the accumulation window started a speculative "
             "optimizer step (offload_optimizer.super_offload); call step() first");
  }
  void add_stats(zero::Stage3Stats& s) const override {
    s.speculative_slices = speculation_->slices();
    s.speculative_rollbacks = speculation_->rollbacks();
    s.speculative_worker_threads = speculation_->worker_threads();
  }

 private:
  std::unique_ptr<OptimizerStep> inner_;
  // Declared after what it writes through (the inner step's optimizer and masters are the engine's), so its worker
  // stops first.
  std::unique_ptr<SpeculativeStep> speculation_;
  zero::Stage& stage_;
};

}  // namespace

std::unique_ptr<OptimizerStep> make_speculative_step(const OptimizerStepParts& parts,
                                                     std::unique_ptr<OptimizerStep> inner, bool may_roll_back,
                                                     int worker_threads) {
  auto speculation =
      std::make_unique<SpeculativeStep>(*parts.optimizer, parts.stage->masters(), may_roll_back, worker_threads);
  SpeculativeStep* worker = speculation.get();
  zero::FinalGradients* final_gradients = zero::feature<zero::FinalGradients>(*parts.stage);
  DS_ASSERT(final_gradients != nullptr, "the stage cannot report final gradients (the config gate asks for stage 3)");
  final_gradients->on_final_gradients(
      [worker](size_t group, int64_t offset, const at::Tensor& grad) { worker->submit(group, offset, grad); });
  return std::make_unique<SpeculativeUpdate>(std::move(inner), std::move(speculation), *parts.stage);
}

}  // namespace deepspeed::runtime
