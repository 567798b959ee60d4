// The OptimizerStep seam (runtime/optimizer_step.h) over a real ZeRO stage in a world of one: the overlapped step
// computes what the in-place one does and publishes only when it lands, the coefficient scales the gradients, the
// parameters follow the masters, and checkpoints see the live masters. Engine-level tests compare whole runs with
// plain LibTorch; these pin the seam's own contract.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"
#include "runtime/optimizer.h"
#include "runtime/optimizer_step.h"
#include "runtime/param_groups.h"
#include "zero/make_stage.h"

namespace deepspeed::runtime {
namespace {

// One Linear layer as the engine holds it: parameter groups, a ZeRO stage, the config's optimizer, and a step. The
// optimizer is offloaded to host memory (also on a CPU), so the masters are copies apart from the parameters and a
// step that forgot to publish would leave the parameters as they were.
struct Rig {
  Rig(int stage, bool overlapped, const std::string& optimizer_json) {
    if (!comm::is_initialized()) comm::init_distributed();
    torch::manual_seed(7);
    module = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(8, 4));
    config = Config::from_string(R"({"train_batch_size": 1, "gradient_clipping": 0, "optimizer": )" +
                                 optimizer_json + R"(, "zero_optimization": {"stage": )" + std::to_string(stage) +
                                 R"(, "offload_optimizer": {"device": "cpu"}}})")
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
  // Fixed gradients of the masters' shapes, times `factor`, in `dtype`.
  std::vector<at::Tensor> grads(double factor, at::ScalarType dtype = at::kFloat) const {
    std::vector<at::Tensor> out;
    for (const at::Tensor& m : stage->masters())
      out.push_back(at::arange(m.numel(), at::kFloat).sin().mul(static_cast<float>(factor)).to(dtype));
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

const std::string kAdam = R"({"type": "Adam", "params": {"lr": 0.01}})";
const std::string kSgd = R"({"type": "SGD", "params": {"lr": 0.1}})";  // linear in the gradient: coef shows 1:1

TEST(OptimizerStep, OverlappedComputesTheInPlaceStepAndPublishesWhenItLands) {
  for (int zero_stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(zero_stage));
    Rig direct(zero_stage, /*overlapped=*/false, kAdam), overlapped(zero_stage, /*overlapped=*/true, kAdam);
    const at::Tensor start = overlapped.weight();
    ASSERT_TRUE(at::equal(start, direct.weight()));
    for (int i = 0; i < 3; ++i) {
      const at::Tensor before = direct.weight();
      direct.step->run(direct.grads(1.0 + i), 0.5);
      EXPECT_FALSE(at::equal(direct.weight(), before)) << "the in-place step published nothing";
      EXPECT_FALSE(direct.step->pending());
      EXPECT_FALSE(direct.step->land());  // nothing runs behind an in-place step
      overlapped.step->run(overlapped.grads(1.0 + i), 0.5);
      EXPECT_TRUE(overlapped.step->pending());
      // The masters change on the worker thread; the parameters only when the step lands.
      ASSERT_TRUE(overlapped.step->land());
      EXPECT_FALSE(overlapped.step->pending());
      EXPECT_TRUE(at::equal(overlapped.weight(), direct.weight())) << "step " << i;
    }
    EXPECT_FALSE(at::equal(direct.weight(), start));
  }
}

// The parameters stay as they were until the overlapped step lands: the next forward runs on them meanwhile.
TEST(OptimizerStep, OverlappedLeavesTheParametersUntilItLands) {
  Rig overlapped(2, /*overlapped=*/true, kAdam);
  const at::Tensor before = overlapped.weight();
  overlapped.step->run(overlapped.grads(1.0), 1.0);
  // Whether the worker finished or not, nothing publishes before land().
  const at::Tensor during = overlapped.weight();
  ASSERT_TRUE(overlapped.step->land());
  EXPECT_TRUE(at::equal(during, before)) << "the parameters changed before the step landed";
  EXPECT_FALSE(at::equal(overlapped.weight(), before)) << "the landing published nothing";
}

// SGD's update is linear in the gradient, so `coef` shows one to one: a coefficient of 2^-10 on gradients 2^10
// times larger is the same step, bit for bit (powers of two scale exactly), and ignoring it would make the step 1024
// times larger. Gradients in bf16 (data_types.grad_accum_dtype) take the chunked fp32 step, which applies `coef` as
// it converts them: the same step again.
TEST(OptimizerStep, TheCoefficientScalesTheGradients) {
  Rig plain(1, false, kSgd), scaled(1, false, kSgd), ignored(1, false, kSgd), chunked(1, false, kSgd),
      chunked_ref(1, false, kSgd);
  const at::Tensor start = plain.weight();
  plain.step->run(plain.grads(1.0), 1.0);
  scaled.step->run(scaled.grads(1024.0), 1.0 / 1024.0);
  EXPECT_TRUE(at::equal(scaled.weight(), plain.weight()));
  ignored.step->run(ignored.grads(1024.0), 1.0);
  const double moved = (plain.weight() - start).abs().max().item<double>();
  ASSERT_GT(moved, 0.0);
  EXPECT_GT((ignored.weight() - start).abs().max().item<double>(), 100.0 * moved);
  // bf16 gradients: converted to fp32 in chunks and scaled there, equal to the same values given as fp32.
  std::vector<at::Tensor> bf16 = chunked.grads(1024.0, at::kBFloat16);
  std::vector<at::Tensor> as_fp32;
  for (const at::Tensor& g : bf16) as_fp32.push_back(g.to(at::kFloat).div(1024.0));
  chunked.step->run(bf16, 1.0 / 1024.0);
  chunked_ref.step->run(as_fp32, 1.0);
  EXPECT_TRUE(at::equal(chunked.weight(), chunked_ref.weight()));
  EXPECT_FALSE(at::equal(chunked.weight(), plain.weight()));  // bf16 rounding shows: the chunked path ran
}

TEST(OptimizerStep, CheckpointsSeeTheLiveMastersAndStates) {
  Rig rig(2, false, kAdam);
  rig.step->run(rig.grads(1.0), 1.0);
  const MasterState state = rig.step->checkpoint_state();
  ASSERT_EQ(state.masters.size(), rig.stage->masters().size());
  EXPECT_TRUE(state.masters[0].is_same(rig.stage->masters()[0]));  // fp32 masters: the live tensors, no copy
  ASSERT_EQ(state.states.size(), 1u);
  EXPECT_EQ(state.states[0].size(), 2u);  // Adam's exp_avg and exp_avg_sq
  EXPECT_GT(state.states[0][1].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(rig.step->resident_state_bytes(), rig.optimizer->state_bytes());
}

// The factory over a one-Linear stage built from `zero_json` (the zero_optimization section) and `optimizer_json`.
struct Built {
  Built(const std::string& optimizer_json, const std::string& zero_json, StepRequest request = {}) {
    if (!comm::is_initialized()) comm::init_distributed();
    torch::manual_seed(7);
    module = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(8, 4));
    config = Config::from_string(R"({"train_batch_size": 1, "gradient_clipping": 1.0, "optimizer": )" +
                                 optimizer_json + R"(, "zero_optimization": )" + zero_json + "}")
                 .resolved(1);
    groups = make_param_groups(*module, {});
    stage = zero::make_stage(config, at::kFloat, module, groups, comm::get_world_group());
    OptimizerStepParts parts;
    parts.config = &config;
    parts.stage = stage.get();
    parts.groups = &groups;
    request.world = comm::get_world_group();
    built = make_optimizer_step(parts, std::move(request));
  }
  std::shared_ptr<torch::nn::LinearImpl> module;
  Config config;
  std::vector<zero::FlatGroup> groups;
  std::unique_ptr<zero::Stage> stage;
  BuiltStep built;
};

std::string refusal(const std::string& optimizer_json, const std::string& zero_json, StepRequest request) {
  try {
    Built b(optimizer_json, zero_json, std::move(request));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(built)";
}

TEST(OptimizerStepFactory, BuildsTheConfigsOptimizerAndRefusesWhatTheModelOrLayoutRulesOut) {
  Built adam(kAdam, R"({"stage": 1})");
  ASSERT_NE(adam.built.optimizer, nullptr);
  EXPECT_EQ(adam.built.optimizer->name(), "fused cpu adam");
  ASSERT_NE(adam.built.step, nullptr);
  StepRequest experts;
  experts.whole_tensor_clash = "MoE expert parallelism (ep_size > 1)";
  std::string what = refusal(R"({"type": "Lamb", "params": {"lr": 0.01}})", R"({"stage": 1})", experts);
  EXPECT_NE(what.find("optimizer.type: Lamb's per-tensor trust ratio is not supported with MoE expert parallelism"),
            std::string::npos)
      << what;
  StepRequest pipeline;
  pipeline.custom_layout = true;
  what = refusal(kAdam, R"({"stage": 2, "offload_optimizer": {"device": "cpu", "overlap_step": true}})", pipeline);
  EXPECT_NE(what.find("zero_optimization.offload_optimizer.overlap_step: not supported inside a pipeline"),
            std::string::npos)
      << what;
  what = refusal(kAdam, R"({"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true}})", pipeline);
  EXPECT_NE(what.find("zero_optimization.offload_optimizer.super_offload: not supported inside a pipeline"),
            std::string::npos)
      << what;
}

// super_offload: the window's last backward starts the step; the step stands when nothing rescales it (coef equals
// the unscale it used) and is rolled back otherwise, leaving run() to take it; while it is open, what must not
// interleave with it is refused.
TEST(OptimizerStepFactory, ASpeculativeStepStandsOnlyWhenNothingRescalesIt) {
  Built b(kAdam, R"({"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true}})");
  OptimizerStep& step = *b.built.step;
  step.check_nothing_started("save_checkpoint");  // nothing open yet
  step.begin_window_backward(1.0);
  try {
    step.check_nothing_started("save_checkpoint");
    ADD_FAILURE() << "an open speculative step was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("save_checkpoint: the backward that ends the accumulation window started a "
                                         "speculative optimizer step"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(step.begin_window_backward(1.0), Error) << "a second backward before step()";
  step.finish_started();
  EXPECT_TRUE(step.accept_started(1.0, 1.0, 0.5));
  step.check_nothing_started("save_checkpoint");
  step.begin_window_backward(1.0);
  step.finish_started();
  EXPECT_FALSE(step.accept_started(0.25, 1.0, 4.0)) << "clipping binds: rolled back";
  step.check_nothing_started("save_checkpoint");
  EXPECT_FALSE(step.accept_started(1.0, 1.0, 0.5)) << "nothing is open";
  zero::Stage3Stats stats;
  step.add_stats(stats);
  EXPECT_EQ(stats.speculative_rollbacks, 1);
  // A resident step has no started work: it never accepts.
  Built plain(kAdam, R"({"stage": 3, "offload_optimizer": {"device": "cpu"}})");
  plain.built.step->begin_window_backward(1.0);
  EXPECT_FALSE(plain.built.step->accept_started(1.0, 1.0, 0.5));
}

// A client torch::optim optimizer steps the model's own parameters: above stage 0 (or in 16 bits) it is refused, and
// before the engine changed the caller's model (stage 3 would have partitioned and released its parameters).
TEST(OptimizerStepFactory, AClientOptimizerAboveStageZeroIsRefusedBeforeTheModelChanges) {
  if (!comm::is_initialized()) comm::init_distributed();
  for (const char* zero : {R"({"stage": 3})", R"({"stage": 2})"}) {
    SCOPED_TRACE(zero);
    torch::manual_seed(7);
    auto model = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(8, 4));
    const at::Tensor before = model->weight.detach().clone();
    InitializeOptions options;
    options.optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
    try {
      deepspeed::initialize(model, Config::from_string(std::string(R"({"train_micro_batch_size_per_gpu": 1,
          "zero_optimization": )") + zero + "}"),
                            std::move(options));
      ADD_FAILURE() << "a client optimizer above stage 0 was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("works only with zero_optimization.stage 0 in fp32"), std::string::npos)
          << e.what();
    }
    ASSERT_EQ(model->weight.sizes(), before.sizes()) << "the refused initialize partitioned the model";
    EXPECT_TRUE(at::equal(model->weight.detach(), before));
  }
}

}  // namespace
}  // namespace deepspeed::runtime
