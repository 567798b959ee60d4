// What a run started by the autotuner reports, through the engine (engine_dist_test at 1, 2, 4
// ranks): the metrics file appears at end_profile_step (not before) with throughput x latency =
// train_batch_size, the model info file holds the full parameter count (also at ZeRO-3, where ranks
// hold partitions), and the flops metric is 3 x the step's forward flops over the latency.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/profiling/flops_profiler.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace {

namespace fs = std::filesystem;

std::string run_dir(const std::string& name) {
  const char* port = std::getenv("MASTER_PORT");
  const fs::path dir =
      fs::temp_directory_path() / ("ds_autotuning_" + name + "_" + (port ? port : "0"));
  if (deepspeed::comm::get_rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  deepspeed::comm::barrier();
  return dir.string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

deepspeed::Config config_for(int stage, const std::string& dir, const std::string& metric) {
  return deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": )" +
      std::to_string(stage) + R"(},
          "autotuning": {"enabled": true, "metric": ")" +
      metric + R"(", "start_profile_step": 2, "end_profile_step": 4,
                         "metric_path": ")" +
      dir + R"(/metrics.json", "model_info": {"profile": true}, "model_info_path": ")" + dir +
      R"(/model_info.json"}})");
}

int64_t count_params(const deepspeed::models::GPT& model) {
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

class AutotuningProbe : public ::testing::TestWithParam<int> {};

TEST_P(AutotuningProbe, MetricsAtEndProfileStepAndTheFullModelSize) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const std::string dir = run_dir("stage" + std::to_string(GetParam()));
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  const int64_t params = count_params(model);
  auto engine = deepspeed::initialize(model, config_for(GetParam(), dir, "throughput"));
  deepspeed::comm::barrier();
  if (rank == 0) {
    const nlohmann::json info = read_json(dir + "/model_info.json");
    EXPECT_EQ(info["num_params"].get<int64_t>(), params);
    EXPECT_EQ(info["trainable_num_params"].get<int64_t>(), params);
  }
  const auto data = tiny_gpt::dataset(tiny_gpt::config());
  tiny_gpt::train(engine, data, 3);
  deepspeed::comm::barrier();
  EXPECT_FALSE(fs::exists(dir + "/metrics.json")) << "written before end_profile_step";
  tiny_gpt::train(engine, data, 1, 3);
  deepspeed::comm::barrier();
  if (rank == 0) {
    const nlohmann::json m = read_json(dir + "/metrics.json");
    const double latency = m["latency"].get<double>();
    EXPECT_GT(latency, 0);
    // samples/s of the window: train_batch_size (2 micro x 2 accumulation x ranks) per step.
    const int64_t batch = 4 * deepspeed::comm::get_world_size();
    // throughput = batch / latency in double, written with round-trip precision: a couple of roundings.
    EXPECT_NEAR(m["throughput"].get<double>() * latency, static_cast<double>(batch),
                tolerance::reordered(tolerance::kFp64Epsilon, 4, 1) * batch);
    EXPECT_EQ(m["train_batch_size"].get<int64_t>(), batch);
    EXPECT_EQ(m["first_step"].get<int64_t>(), 2);  // the window: steps 3 and 4
    EXPECT_EQ(m["steps"].get<int64_t>(), 2);
    EXPECT_EQ(m["FLOPS_per_gpu"].get<double>(), 0.0) << "flops are counted only for metric flops";
  }
  deepspeed::comm::barrier();
}

INSTANTIATE_TEST_SUITE_P(Stages, AutotuningProbe, ::testing::Values(0, 3));

TEST(AutotuningProbeFlops, ThreeTimesTheStepsForwardFlopsOverLatency) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const std::string dir = run_dir("flops");
  const auto data = tiny_gpt::dataset(tiny_gpt::config());
  // The reference: one micro-batch's forward (loss included) counted by the profiler itself.
  int64_t micro_flops = 0;
  {
    auto reference = tiny_gpt::make_model(tiny_gpt::config());
    at::Tensor x, y;
    tiny_gpt::split_batch(data, {0, 1}, &x, &y);
    deepspeed::profiling::FlopsProfiler prof(reference.ptr());
    prof.start_profile();
    reference->forward(x, y);
    prof.stop_profile();
    micro_flops = prof.get_total_flops();
  }
  ASSERT_GT(micro_flops, 0);
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  auto engine = deepspeed::initialize(model, config_for(0, dir, "flops"));
  tiny_gpt::train(engine, data, 4);
  deepspeed::comm::barrier();
  if (rank == 0) {
    const nlohmann::json m = read_json(dir + "/metrics.json");
    const double step_forward_flops =
        m["FLOPS_per_gpu"].get<double>() * m["latency"].get<double>() / 3.0;
    // flops x 3 / latency and back, in double: a few roundings.
    EXPECT_NEAR(step_forward_flops, 2.0 * micro_flops,
                tolerance::reordered(tolerance::kFp64Epsilon, 8, 1) * micro_flops)
        << "2 micro-batches per step";
  }
  deepspeed::comm::barrier();
}

TEST(AutotuningProbeModelInfo, FrozenParametersCountInTheModelSize) {
  tiny_gpt::ensure_comm();
  const std::string dir = run_dir("frozen");
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  const int64_t params = count_params(model);
  at::Tensor frozen = model->parameters().front();
  frozen.set_requires_grad(false);
  auto engine = deepspeed::initialize(model, config_for(0, dir, "throughput"));
  deepspeed::comm::barrier();
  if (deepspeed::comm::get_rank() == 0) {
    const nlohmann::json info = read_json(dir + "/model_info.json");
    EXPECT_EQ(info["num_params"].get<int64_t>(), params);
    EXPECT_EQ(info["trainable_num_params"].get<int64_t>(), params - frozen.numel());
  }
  deepspeed::comm::barrier();
}

TEST(AutotuningProbeWindow, OpensAtTheFirstStepAtOrPastTheStart) {
  // With start_profile_step 0 (or a run resumed past it) the first step taken opens the window,
  // which then spans end - start steps, instead of never reporting or timing from nowhere.
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const std::string dir = run_dir("late");
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  auto config = config_for(0, dir, "throughput");
  config.autotuning.start_profile_step = 0;  // the window opens after the first step
  config.autotuning.end_profile_step = 3;
  auto engine = deepspeed::initialize(model, config);
  tiny_gpt::train(engine, tiny_gpt::dataset(tiny_gpt::config()), 4);
  deepspeed::comm::barrier();
  if (rank == 0) {
    const nlohmann::json m = read_json(dir + "/metrics.json");
    EXPECT_EQ(m["first_step"].get<int64_t>(), 1);
    EXPECT_EQ(m["steps"].get<int64_t>(), 3);
  }
  deepspeed::comm::barrier();
}

TEST(AutotuningProbeConfig, ModelInfoProfileNeedsAPath) {
  tiny_gpt::ensure_comm();
  auto model = tiny_gpt::make_model(tiny_gpt::config());
  const auto config = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
          "autotuning": {"enabled": true, "model_info": {"profile": true}}})");
  try {
    deepspeed::initialize(model, config);
    FAIL() << "no error";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "autotuning.model_info.profile needs autotuning.model_info_path"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
