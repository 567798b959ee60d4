// The checkpoint loader's plan (checkpoint/load_plan.h) over synthetic checkpoints written by hand
// (synthetic_partitions.h): saved by 3 ranks in two groups, planned for 2 ranks holding one group in another order,
// the copies fill each rank's masters and Adam states with exactly the original tensors' elements; mismatches,
// another optimizer and a missing buffer are refused naming what is wrong; what a module-only load leaves out.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/load_plan.h"
#include "synthetic_partitions.h"
#include "temp_dir.h"

namespace ckpt = deepspeed::checkpoint;
using ds_test::TempDir;

namespace {

// Group 0 holds 35 + 13 = 48 elements, group 1 48 + 1 + 9 = 58 (padded to 60), cut unevenly over 3 ranks.
void write_three_ranks(const std::string& dir) {
  synthetic_partitions::write_partitioned(dir, "t", 3, {{0, 20, 21, 48}, {0, 5, 50, 60}}, "", /*adam=*/true);
}

// The loading engine's rank `rank` of `world`: every parameter in one group, in reverse order, its flat buffer
// split evenly.
ckpt::LoadTarget target(const std::string& dir, int rank, int world) {
  ckpt::LoadTarget t;
  t.dir = dir;
  t.rank = rank;
  t.world_size = world;
  t.names.emplace_back();
  t.shapes.emplace_back();
  std::vector<synthetic_partitions::Original> params = synthetic_partitions::originals();
  int64_t total = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    t.names[0].push_back(it->name);
    t.shapes[0].push_back(it->value.sizes().vec());
    total += it->value.numel();
  }
  const int64_t part = (total + world - 1) / world, lo = part * rank, hi = std::min(total, lo + part);
  int64_t start = 0;
  for (size_t i = 0; i < t.names[0].size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : t.shapes[0][i]) numel *= d;
    const int64_t b = std::max(lo, start), e = std::min(hi, start + numel);
    if (b < e) t.fragments.push_back({0, i, t.shapes[0][i], b - start, e - start, b - lo});
    start += numel;
  }
  t.buffers.emplace_back("norm.running_mean", at::zeros({3}, at::kDouble));
  t.optimizer = ckpt::LoadTarget::Optimizer{"fused cpu adamw", {"exp_avg", "exp_avg_sq"}, false};
  t.sections = {"lr_scheduler", "loss_scaler"};
  t.train_batch_size = 8;
  return t;
}

// This rank's part of the reversed parameters, flattened: what its masters must hold.
at::Tensor expected_part(int rank, int world) {
  std::vector<synthetic_partitions::Original> params = synthetic_partitions::originals();
  std::vector<at::Tensor> flat;
  for (auto it = params.rbegin(); it != params.rend(); ++it) flat.push_back(it->value.reshape({-1}));
  at::Tensor all = at::cat(flat);
  const int64_t part = (all.numel() + world - 1) / world, lo = part * rank;
  return all.narrow(0, lo, std::min(all.numel(), lo + part) - lo);
}

std::string refusal(const ckpt::LoadTarget& t) {
  try {
    ckpt::plan_load(t);
  } catch (const ckpt::CheckpointError& e) {
    return e.what();
  }
  return "(loaded)";
}

}  // namespace

TEST(LoadPlan, CopiesFillAnotherPartitioningWithTheSavedElements) {
  TempDir tmp;
  write_three_ranks(tmp.path());
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const ckpt::LoadTarget t = target(tmp.path(), rank, 2);
    const ckpt::LoadPlan plan = ckpt::plan_load(t);
    const at::Tensor want = expected_part(rank, 2);
    std::vector<at::Tensor> masters = {at::full({want.numel()}, -7.0)};
    std::vector<std::vector<at::Tensor>> states = {{at::full({want.numel()}, -7.0), at::full({want.numel()}, -7.0)}};
    ckpt::copy_masters(plan, masters, states);
    EXPECT_TRUE(at::equal(masters[0], want));
    EXPECT_TRUE(at::equal(states[0][0], want * 2));
    EXPECT_TRUE(at::equal(states[0][1], want.abs() * 3));
    ASSERT_TRUE(plan.optimizer.has_value());
    EXPECT_EQ(plan.optimizer->step, 5);
    ASSERT_EQ(plan.buffers.size(), 1u);
    EXPECT_TRUE(at::equal(plan.buffers[0].second, at::arange(3, at::kDouble)));
    EXPECT_EQ(plan.global_steps, 5);
    EXPECT_EQ(plan.global_samples, 40);
    EXPECT_EQ(plan.saved_batch, 8) << "a file without train_batch_size was saved at this run's batch";
    EXPECT_FALSE(plan.micro_steps.has_value());
    EXPECT_FALSE(plan.rng.defined()) << "the files were saved by 3 ranks, not 2";
    ASSERT_EQ(plan.sections.size(), 1u) << "the file has lr_scheduler, not loss_scaler";
    EXPECT_EQ(plan.sections.at("lr_scheduler").at("last_batch_iteration").toInt(), 4);
    ASSERT_TRUE(plan.client_state.has_value());
    EXPECT_EQ(plan.client_state->at("epoch").toInt(), 3);
    EXPECT_EQ(plan.path, tmp.path() + "/t");
  }
}

TEST(LoadPlan, AModuleOnlyPlanLeavesTheTrainingStateOut) {
  TempDir tmp;
  write_three_ranks(tmp.path());
  ckpt::LoadTarget t = target(tmp.path(), 0, 1);
  t.full = false;
  const ckpt::LoadPlan plan = ckpt::plan_load(t);
  EXPECT_FALSE(plan.optimizer.has_value());
  EXPECT_TRUE(plan.sections.empty());
  EXPECT_EQ(plan.global_steps, 0);
  EXPECT_EQ(plan.buffers.size(), 1u);
  std::vector<at::Tensor> masters = {at::zeros({106})};
  ckpt::copy_masters(plan, masters, {});
  EXPECT_TRUE(at::equal(masters[0], expected_part(0, 1)));
}

TEST(LoadPlan, EveryParameterMismatchIsNamedInOneLine) {
  TempDir tmp;
  write_three_ranks(tmp.path());
  ckpt::LoadTarget t = target(tmp.path(), 0, 1);
  t.names[0][4] = "embedding.weight";  // was embed.weight
  t.shapes[0][3] = {14};               // embed.bias holds 13
  const std::string what = refusal(t);
  EXPECT_NE(what.find("missing 'embedding.weight'"), std::string::npos) << what;
  EXPECT_NE(what.find("not in this model 'embed.weight'"), std::string::npos) << what;
  EXPECT_NE(what.find("shape differs for 'embed.bias' [13] vs this model's [14]"), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

TEST(LoadPlan, AnotherOptimizerOrAMissingBufferIsRefused) {
  TempDir tmp;
  write_three_ranks(tmp.path());
  ckpt::LoadTarget t = target(tmp.path(), 0, 1);
  t.optimizer = ckpt::LoadTarget::Optimizer{"sgd", {"momentum_buffer"}, false};
  std::string what = refusal(t);
  EXPECT_NE(what.find("holds the state of optimizer 'fused cpu adamw' (exp_avg, exp_avg_sq), this engine runs 'sgd'"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("load_optimizer_states=false"), std::string::npos) << what;
  t = target(tmp.path(), 0, 1);
  t.buffers.emplace_back("norm.running_var", at::zeros({3}, at::kDouble));
  what = refusal(t);
  EXPECT_NE(what.find("has no buffer 'norm.running_var'"), std::string::npos) << what;
  t = target(tmp.path(), 0, 1);
  t.buffers[0].second = at::zeros({4}, at::kDouble);
  what = refusal(t);
  EXPECT_NE(what.find("buffer 'norm.running_mean' has shape [3], this model's is [4]"), std::string::npos) << what;
}

TEST(LoadPlan, NothingToLoadOnlyWithoutATagAndWithoutLatest) {
  TempDir tmp;
  ckpt::LoadTarget t = target(tmp.path(), 0, 1);
  EXPECT_TRUE(ckpt::nothing_to_load(t));
  t.tag = "t";
  EXPECT_FALSE(ckpt::nothing_to_load(t)) << "a named tag is loaded (or its absence reported)";
  EXPECT_NE(refusal(t).find("t"), std::string::npos);
  write_three_ranks(tmp.path());
  t.tag.reset();
  EXPECT_FALSE(ckpt::nothing_to_load(t)) << "latest names t";
  t.universal = true;
  EXPECT_TRUE(ckpt::nothing_to_load(t)) << "a universal load reads latest_universal";
}

TEST(SavedOptimizer, GroupHyperparametersCorrespondOrShareOneValue) {
  ckpt::SavedOptimizer s;
  s.lrs = {0.1, 0.2};
  s.momenta = {0.9, std::nullopt};
  auto same = s.group_hyperparameters(2);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ((*same)[1].first, 0.2);
  EXPECT_FALSE((*same)[1].second.has_value());
  EXPECT_FALSE(s.group_hyperparameters(3).has_value()) << "three groups, two different saved values";
  s.lrs = {0.1, 0.1};
  s.momenta = {0.9, 0.9};
  auto shared = s.group_hyperparameters(3);
  ASSERT_TRUE(shared.has_value());
  ASSERT_EQ(shared->size(), 3u);
  EXPECT_EQ((*shared)[2].first, 0.1);
  EXPECT_EQ(*(*shared)[2].second, 0.9);
}
