// The IterationSchedule seam (runtime/iteration_schedule.h) in a world of one: gradient accumulation's windows,
// divisors and resume point, and what ZenFlow's schedule changes at the seam (update windows that count iterations, a
// save point only at a window's start, its own checkpoint section). The ZenFlow dist tests compare whole runs with a
// plain loop; these pin the contract the engine relies on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "runtime/iteration_schedule.h"
#include "runtime/optimizer.h"
#include "runtime/param_groups.h"
#include "zero/make_stage.h"

namespace deepspeed::runtime {
namespace {

struct Rig {
  explicit Rig(const std::string& extra) {
    if (!comm::is_initialized()) comm::init_distributed();
    module = std::make_shared<torch::nn::LinearImpl>(torch::nn::LinearOptions(8, 4));
    config = Config::from_string(R"({"train_micro_batch_size_per_gpu": 1, )" + extra +
                                 R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})")
                 .resolved(1);
    groups = make_param_groups(*module, {});
    stage = zero::make_stage(config, at::kFloat, module, groups, comm::get_world_group());
    optimizer = make_fused_optimizer(*config.optimizer, groups, stage->masters(), /*resident_state=*/true);
    IterationParts parts{&config, stage.get(), &groups, optimizer.get(),
                         [] { return std::vector<std::vector<std::string>>{{"weight", "bias"}}; },
                         comm::get_world_group(), {}};
    parts.actions.optimizer_step = [this] { ++optimizer_steps; };
    parts.actions.land = [] {};
    parts.actions.advance_schedule = [] {};
    parts.actions.lrs = [] { return std::vector<double>{0.01}; };
    schedule = make_iteration_schedule(std::move(parts), {});
  }
  std::shared_ptr<torch::nn::LinearImpl> module;
  Config config;
  std::vector<zero::FlatGroup> groups;
  std::unique_ptr<zero::Stage> stage;
  std::unique_ptr<EngineOptimizer> optimizer;
  std::unique_ptr<IterationSchedule> schedule;
  int optimizer_steps = 0;
};

TEST(IterationSchedule, GradientAccumulationStepsAtEachWindowsEnd) {
  Rig rig(R"("gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1})");
  IterationSchedule& s = *rig.schedule;
  EXPECT_EQ(s.loss_divisor(), 4);
  EXPECT_EQ(s.gradient_divisor(3), 1);
  EXPECT_FALSE(s.counts_iterations());
  EXPECT_EQ(s.section_key(), nullptr);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(s.ends_window(i), i == 3 || i == 7) << "iteration " << i;
    s.run(i, s.ends_window(i));
  }
  EXPECT_EQ(rig.optimizer_steps, 2);
  EXPECT_EQ(s.resume(5, std::nullopt, std::nullopt, "f"), 20) << "5 steps of 4 micro-batches";
}

TEST(IterationSchedule, ZenFlowWindowsCountIterationsAndSaveOnlyAtAWindowsStart) {
  Rig rig(R"("gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
          "zenflow": {"topk_ratio": 0.5, "update_interval": 3, "full_warm_up_rounds": 0}})");
  IterationSchedule& s = *rig.schedule;
  EXPECT_EQ(s.loss_divisor(), 3);
  EXPECT_TRUE(s.counts_iterations());
  EXPECT_TRUE(s.ends_window(2));
  EXPECT_FALSE(s.ends_window(3));
  ASSERT_NE(s.section_key(), nullptr);
  EXPECT_EQ(std::string(s.section_key()), "zenflow");
  s.check_save_point(3, "save_checkpoint");  // iteration 3 starts a window
  try {
    s.check_save_point(2, "save_checkpoint");
    ADD_FAILURE() << "a save inside an update window was allowed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every update_interval = 3 iterations"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.resume(7, 21, std::nullopt, "f"), 0) << "no ZenFlow state: the schedule starts afresh";
  EXPECT_THROW(s.resume(7, std::nullopt, s.section().toGenericDict(), "f"), checkpoint::CheckpointError)
      << "a section without the iteration count it was saved at";
  EXPECT_EQ(s.resume(7, 21, s.section().toGenericDict(), "f"), 21);
}

}  // namespace
}  // namespace deepspeed::runtime
