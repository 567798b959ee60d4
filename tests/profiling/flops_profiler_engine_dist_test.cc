// The `flops_profiler` config section through the engine at 2 ranks: global rank 0 alone profiles
// the step that begins with global_steps == profile_step (DeepSpeed's engine), summing the forwards
// of its micro-batches, and writes the report once, at that step's boundary, labelled with the step
// count after it. Disabled, nothing is written; the pipeline engine refuses the section.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/pipe/engine.h"
#include "deepspeed/pipe/module.h"
#include "deepspeed/profiling/flops_profiler.h"
#include "gpt.h"
#include "gpt_flops.h"
#include "gpt_pipe.h"

namespace {

namespace fs = std::filesystem;
namespace dsp = deepspeed::profiling;
using deepspeed::models::GPT;

constexpr int64_t kMicro = 2;
constexpr int64_t kAccumulation = 2;

void ensure_comm() {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
}

// A folder shared by the ranks of this run (named after its port), emptied by rank 0.
std::string shared_dir(const std::string& name) {
  const char* port = std::getenv("MASTER_PORT");
  const fs::path dir =
      fs::temp_directory_path() / ("ds_flops_" + name + "_" + std::string(port ? port : "0"));
  if (deepspeed::comm::get_rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  deepspeed::comm::barrier();
  return dir.string();
}

deepspeed::Config make_config(const std::string& profiler, int stage = 0) {
  return deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": )" + std::to_string(kMicro) +
      R"(, "gradient_accumulation_steps": )" + std::to_string(kAccumulation) +
      R"(, "zero_optimization": {"stage": )" + std::to_string(stage) +
      R"(, "stage3_param_persistence_threshold": 0}, "steps_per_print": 1000,
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "flops_profiler": )" +
      profiler + "}");
}

// One optimizer step of kAccumulation micro-batches of kMicro random sequences.
void train_step(deepspeed::Engine& engine, const deepspeed::models::GPTConfig& cfg) {
  for (int64_t m = 0; m < kAccumulation; ++m) {
    at::Tensor batch = at::randint(cfg.vocab_size, {kMicro, cfg.seq_len + 1}, at::kLong);
    at::Tensor loss =
        engine.forward(batch.narrow(1, 0, cfg.seq_len), batch.narrow(1, 1, cfg.seq_len));
    engine.backward(loss);
    engine.step();
  }
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value DeepSpeed's summary prints after `label` (`{:<70}  {:<8}`).
std::string summary_value(const std::string& report, const std::string& label) {
  const size_t at = report.find("\n" + label);
  if (at == std::string::npos) return "<no line " + label + ">";
  std::string value = report.substr(at + 1 + 72, report.find('\n', at + 1) - at - 1 - 72);
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

TEST(FlopsProfilerEngine, Rank0WritesTheProfiledStepOnce) {
  ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const std::string dir = shared_dir("enabled");
  // Each rank names its own file, so a report from any rank but 0 would show.
  const std::string file = dir + "/rank" + std::to_string(rank) + "/profile.txt";
  const auto cfg = gpt_flops::config();
  at::manual_seed(11 + rank);
  GPT model(cfg);
  auto engine = deepspeed::initialize(
      model,
      make_config(R"({"enabled": true, "profile_step": 2, "module_depth": -1, "top_modules": 2,
                            "detailed": true, "output_file": ")" +
                  file + R"("})"));
  train_step(engine, cfg);
  train_step(engine, cfg);
  EXPECT_FALSE(fs::exists(file))
      << "steps 1 and 2 are not profiled (global_steps 0 and 1 when they begin)";
  train_step(engine, cfg);
  const bool written = fs::exists(file);
  const std::string report = written ? read(file) : "";
  // Once: later steps write nothing.
  fs::remove(file);
  train_step(engine, cfg);
  EXPECT_FALSE(fs::exists(file)) << "the report is written once";
  if (rank != 0) {
    EXPECT_FALSE(written) << "only global rank 0 profiles";
    return;
  }
  ASSERT_TRUE(written);
  EXPECT_NE(report.find("Profile Summary at step 3:"), std::string::npos) << report;
  EXPECT_EQ(summary_value(report, "world size:"), "2");
  EXPECT_EQ(summary_value(report, "data parallel size:"), "2");
  EXPECT_EQ(summary_value(report, "batch size per GPU:"), std::to_string(kMicro));
  EXPECT_EQ(summary_value(report, "params per GPU:"),
            dsp::params_to_string(static_cast<double>(cfg.num_parameters())));
  // The forwards of the step's micro-batches, summed.
  const gpt_flops::Count one = gpt_flops::forward(cfg, kMicro);
  EXPECT_EQ(summary_value(report, "fwd MACs per GPU:"),
            dsp::macs_to_string(static_cast<double>(kAccumulation * one.macs)));
  EXPECT_EQ(summary_value(report, "fwd flops per GPU:"),
            dsp::number_to_string(static_cast<double>(kAccumulation * one.flops)));
  for (const char* line :
       {"fwd latency:", "bwd latency:", "step latency:", "iter latency:", "samples/second:",
        "Aggregated Profile per GPU", "Detailed Profile per GPU", "(attn): CausalSelfAttention("})
    EXPECT_NE(report.find(line), std::string::npos) << line;
}

// ZeRO-3 releases each block's parameters between uses: the counts are still the full model's
// (DeepSpeed's ds_numel), and the FLOPs the same as unpartitioned.
TEST(FlopsProfilerEngine, Stage3CountsTheFullParameters) {
  ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const std::string dir = shared_dir("stage3");
  const std::string file = dir + "/rank" + std::to_string(rank) + "/profile.txt";
  auto cfg = gpt_flops::config();
  cfg.shard_blocks = true;  // each block a ZeRO-3 unit
  GPT model(cfg);
  auto engine = deepspeed::initialize(
      model,
      make_config(R"({"enabled": true, "profile_step": 1, "output_file": ")" + file + R"("})", 3));
  train_step(engine, cfg);
  train_step(engine, cfg);  // profiled: it begins at global_steps 1
  if (rank != 0) return;
  const std::string report = read(file);
  EXPECT_EQ(summary_value(report, "params per GPU:"),
            dsp::params_to_string(static_cast<double>(cfg.num_parameters())))
      << report;
  const gpt_flops::Count one = gpt_flops::forward(cfg, kMicro);
  EXPECT_EQ(summary_value(report, "fwd MACs per GPU:"),
            dsp::macs_to_string(static_cast<double>(kAccumulation * one.macs)));
}

// The profiler runs on rank 0 alone: an output file it cannot write turns it off with a message
// instead of throwing from rank 0's step() while the other ranks wait in their next collective.
TEST(FlopsProfilerEngine, UnwritableOutputDoesNotStopTraining) {
  ensure_comm();
  const std::string dir = shared_dir("unwritable");
  if (deepspeed::comm::get_rank() == 0) std::ofstream(dir + "/a_file") << "not a directory";
  deepspeed::comm::barrier();
  const auto cfg = gpt_flops::config();
  GPT model(cfg);
  auto engine = deepspeed::initialize(
      model, make_config(R"({"enabled": true, "profile_step": 1, "output_file": ")" + dir +
                         R"(/a_file/profile.txt"})"));
  for (int s = 0; s < 3; ++s) EXPECT_NO_THROW(train_step(engine, cfg)) << "step " << s;
  EXPECT_EQ(engine.global_steps(), 3);
}

TEST(FlopsProfilerEngine, DisabledWritesNothing) {
  ensure_comm();
  const std::string dir = shared_dir("disabled");
  const std::string file = dir + "/profile.txt";
  const auto cfg = gpt_flops::config();
  GPT model(cfg);
  auto engine = deepspeed::initialize(
      model,
      make_config(R"({"enabled": false, "profile_step": 1, "output_file": ")" + file + R"("})"));
  for (int s = 0; s < 3; ++s) train_step(engine, cfg);
  deepspeed::comm::barrier();
  EXPECT_FALSE(fs::exists(file));
}

TEST(FlopsProfilerEngine, PipelineEngineRefusesTheProfiler) {
  ensure_comm();
  deepspeed::pipe::PipelineModuleOptions o;
  o.layers = deepspeed::models::gpt_pipeline_layers(gpt_flops::config());
  o.num_stages = 1;
  o.loss_fn = deepspeed::models::gpt_pipeline_loss;
  deepspeed::pipe::PipelineModule module(o);
  try {
    deepspeed::pipe::initialize(module, make_config(R"({"enabled": true})"));
    FAIL() << "pipe::initialize accepted flops_profiler.enabled";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("flops_profiler.enabled", 0), 0u) << e.what();
  }
}

}  // namespace
