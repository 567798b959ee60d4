// The OptimizerStep seam (runtime/optimizer_step.h) over a real ZeRO stage in a world of one: the overlapped step
// computes what the in-place one does and publishes only when it lands, the coefficient scales the gradients, the
// parameters follow the masters, and checkpoints see the live masters. Engine-level tests compare whole runs with
// plain LibTorch; these pin the seam's own contract.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <memory>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "runtime/optimizer.h"
#include "runtime/optimizer_step.h"
#include "runtime/param_groups.h"
#include "zero/make_stage.h"

namespace deepspeed::runtime {
namespace {

// One Linear layer as the engine holds it: parameter groups, a ZeRO stage, the config's Adam, and a step.
struct Rig {
  explicit Rig(int stage, bool overlapped) {
    if (!comm::is_initialized()) comm::init_distributed();
    torch::manual_seed(7);
    module = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(8, 4));
    config = Config::from_string(R"({"train_batch_size": 1, "gradient_clipping": 0,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "zero_optimization": {"stage": )" +
                                 std::to_string(stage) + "}}")
                 .resolved(1);
    groups = make_param_groups(*module, {});
    this->stage = zero::make_stage(config, at::kFloat, module, groups, comm::get_world_group());
    optimizer = make_fused_optimizer(*config.optimizer, groups, this->stage->masters(), /*resident_state=*/true);
    OptimizerStepParts parts;
    parts.config = &config;
    parts.stage = this->stage.get();
    parts.optimizer = optimizer.get();
    parts.groups = &groups;
    step = make_resident_step(parts, overlapped);
  }
  // Fixed gradients of the masters' shapes, times `factor`.
  std::vector<at::Tensor> grads(double factor) const {
    std::vector<at::Tensor> out;
    for (const at::Tensor& m : stage->masters())
      out.push_back(at::arange(m.numel(), at::kFloat).sin().mul(static_cast<float>(factor)));
    return out;
  }
  at::Tensor weight() const { return module->weight.detach().clone(); }

  std::shared_ptr<torch::nn::LinearImpl> module;
  Config config;
  std::vector<zero::FlatGroup> groups;
  std::unique_ptr<zero::Stage> stage;
  std::unique_ptr<EngineOptimizer> optimizer;
  std::unique_ptr<OptimizerStep> step;
};

TEST(OptimizerStep, OverlappedComputesTheInPlaceStepAndPublishesWhenItLands) {
  for (int zero_stage : {0, 1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(zero_stage));
    Rig direct(zero_stage, /*overlapped=*/false), overlapped(zero_stage, /*overlapped=*/true);
    const at::Tensor start = overlapped.weight();
    ASSERT_TRUE(at::equal(start, direct.weight()));
    for (int i = 0; i < 3; ++i) {
      direct.step->run(direct.grads(1.0 + i), 0.5);
      EXPECT_FALSE(direct.step->pending());
      EXPECT_FALSE(direct.step->land());  // nothing runs behind an in-place step
      const at::Tensor before = overlapped.weight();
      overlapped.step->run(overlapped.grads(1.0 + i), 0.5);
      EXPECT_TRUE(overlapped.step->pending());
      ASSERT_TRUE(overlapped.step->land());
      EXPECT_FALSE(overlapped.step->pending());
      EXPECT_FALSE(at::equal(overlapped.weight(), before)) << "the landing published nothing";
      EXPECT_TRUE(at::equal(overlapped.weight(), direct.weight())) << "step " << i;
    }
    EXPECT_FALSE(at::equal(direct.weight(), start));
  }
}

// A coefficient of 2^-k on gradients 2^k times larger is the same step, bit for bit (powers of two scale exactly):
// a step that ignored `coef`, or applied it twice, would differ.
TEST(OptimizerStep, TheCoefficientScalesTheGradients) {
  Rig scaled(1, false), plain(1, false);
  scaled.step->run(scaled.grads(1024.0), 1.0 / 1024.0);
  plain.step->run(plain.grads(1.0), 1.0);
  EXPECT_TRUE(at::equal(scaled.weight(), plain.weight()));
  Rig ignored(1, false);
  ignored.step->run(ignored.grads(1024.0), 1.0);
  // Adam normalises the gradient's size away except through eps; with the second moment 2^20 times larger the step
  // differs in the low bits. That difference is what the equality above would miss if the coefficient were ignored.
  EXPECT_FALSE(at::equal(ignored.weight(), plain.weight()));
}

TEST(OptimizerStep, CheckpointsSeeTheLiveMastersAndStates) {
  Rig rig(2, false);
  rig.step->run(rig.grads(1.0), 1.0);
  const MasterState state = rig.step->checkpoint_state();
  ASSERT_EQ(state.masters.size(), rig.stage->masters().size());
  EXPECT_TRUE(state.masters[0].is_same(rig.stage->masters()[0]));  // fp32 masters: the live tensors, no copy
  ASSERT_EQ(state.states.size(), 1u);
  EXPECT_EQ(state.states[0].size(), 2u);  // Adam's exp_avg and exp_avg_sq
  EXPECT_GT(state.states[0][1].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(rig.step->resident_state_bytes(), rig.optimizer->state_bytes());
}

}  // namespace
}  // namespace deepspeed::runtime
