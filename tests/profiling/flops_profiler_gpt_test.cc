// The reference GPT under the flops profiler: its forward's FLOPs and MACs equal the count by hand
// in gpt_flops.h, each module is charged its own work (attention its products, each Linear its
// matmul), parameter counts are the modules' own, and the report names every module in DeepSpeed's
// layout.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <unordered_set>

#include "deepspeed/profiling/flops_profiler.h"
#include "gpt.h"
#include "gpt_flops.h"
#include "temp_dir.h"

namespace {

namespace dsp = deepspeed::profiling;
using deepspeed::models::GPT;

constexpr int64_t kBatch = 2;

class GPTProfile : public ::testing::Test {
 protected:
  void SetUp() override {
    at::manual_seed(3);
    cfg_ = gpt_flops::config();
    model_ = GPT(cfg_);
    tokens_ = at::randint(cfg_.vocab_size, {kBatch, cfg_.seq_len}, at::kLong);
    targets_ = at::randint(cfg_.vocab_size, {kBatch, cfg_.seq_len}, at::kLong);
  }
  void profile(dsp::FlopsProfiler& prof) {
    prof.start_profile();
    model_->forward(tokens_, targets_);
    prof.stop_profile();
  }

  deepspeed::models::GPTConfig cfg_;
  GPT model_{nullptr};
  at::Tensor tokens_, targets_;
};

TEST_F(GPTProfile, TotalsEqualTheCountByHand) {
  dsp::FlopsProfiler prof(model_.ptr());
  profile(prof);
  const gpt_flops::Count want = gpt_flops::forward(cfg_, kBatch);
  EXPECT_EQ(prof.get_total_macs(), want.macs);
  EXPECT_EQ(prof.get_total_flops(), want.flops);
  EXPECT_EQ(prof.get_total_params(), cfg_.num_parameters());
  EXPECT_GT(prof.get_total_duration(), 0.0);
  // The same numbers in this configuration, written out: MACs = 2 (12 x 64 x 64^2 + 2 x 2 x 32^2 x
  // 64) + 4096 x 256.
  EXPECT_EQ(want.macs, 7864320);
  EXPECT_EQ(want.flops, 15990784);
}

TEST_F(GPTProfile, EachModuleIsChargedItsOwnWork) {
  dsp::FlopsProfiler prof(model_.ptr());
  profile(prof);
  const int64_t B = kBatch, T = cfg_.seq_len, C = cfg_.hidden, V = cfg_.vocab_size;
  const int64_t BTC = B * T * C;
  for (const std::string block : {"blocks.0", "blocks.1"}) {
    const dsp::ModuleProfile attn = prof.module_profile(block + ".attn");
    const dsp::ModuleProfile qkv = prof.module_profile(block + ".attn.qkv");
    const dsp::ModuleProfile proj = prof.module_profile(block + ".attn.proj");
    EXPECT_EQ(attn.type, "CausalSelfAttention");
    EXPECT_EQ(qkv.type, "Linear");
    EXPECT_EQ(qkv.macs, BTC * 3 * C);
    EXPECT_EQ(qkv.flops, 2 * BTC * 3 * C + B * T * 3 * C);  // bias add on each output
    EXPECT_EQ(proj.macs, BTC * C);
    // The attention products, scale and softmax belong to attention itself, not to its Linears or
    // the block.
    const gpt_flops::Count own = gpt_flops::attention_own(cfg_, kBatch);
    EXPECT_EQ(attn.macs - qkv.macs - proj.macs, own.macs) << block;
    EXPECT_EQ(attn.flops - qkv.flops - proj.flops, own.flops) << block;
    EXPECT_EQ(prof.module_profile(block + ".ln1").flops, 5 * BTC);
    EXPECT_EQ(prof.module_profile(block + ".fc").macs, BTC * 4 * C);
    EXPECT_EQ(prof.module_profile(block + ".fc_proj").macs, BTC * 4 * C);
    // The block itself: its two residual adds and the gelu.
    const dsp::ModuleProfile b = prof.module_profile(block);
    int64_t children = 0;
    for (const char* child : {".ln1", ".attn", ".ln2", ".fc", ".fc_proj"})
      children += prof.module_profile(block + child).flops;
    EXPECT_EQ(b.flops - children, 2 * BTC + 4 * BTC);
    EXPECT_GT(attn.latency, 0.0);
    EXPECT_LE(attn.latency, b.latency);
  }
  // The tied LM head multiplies by a view of wte's weight: charged to wte, which registered it.
  EXPECT_EQ(prof.module_profile("wte").macs, BTC * V);
  EXPECT_EQ(prof.module_profile("wpe").flops, 0);
  // The root keeps the embedding sum; cross-entropy costs nothing.
  int64_t children = 0;
  for (const char* child : {"wte", "wpe", "blocks", "ln_f"})
    children += prof.module_profile(child).flops;
  EXPECT_EQ(prof.module_profile("").flops - children, BTC);
  EXPECT_EQ(prof.module_profile("ln_f").flops, 5 * BTC);
}

TEST_F(GPTProfile, ParameterCountsAreTheModulesOwn) {
  dsp::FlopsProfiler prof(model_.ptr());
  profile(prof);
  std::unordered_set<std::string> seen;
  for (const auto& item : model_->named_modules()) {
    int64_t numel = 0;
    for (const auto& p : item.value()->parameters()) numel += p.numel();
    EXPECT_EQ(prof.module_profile(item.key()).params, numel) << item.key();
    seen.insert(item.key());
  }
  EXPECT_EQ(prof.module_profiles().size(), seen.size());
  EXPECT_EQ(prof.module_profile("blocks.1.attn.qkv").params,
            cfg_.hidden * 3 * cfg_.hidden + 3 * cfg_.hidden);
}

TEST_F(GPTProfile, ReportNamesEveryModuleInDeepSpeedsLayout) {
  dsp::FlopsProfiler prof(model_.ptr());
  profile(prof);
  dsp::PrintOptions o;
  o.profile_step = 7;
  o.top_modules = 2;
  const std::string report = prof.format_model_profile(o);
  for (const char* line :
       {"-------------------------- DeepSpeed Flops Profiler --------------------------",
        "Profile Summary at step 7:", "params per GPU:", "fwd MACs per GPU:", "fwd flops per GPU:",
        "fwd latency:", "fwd FLOPS per GPU = fwd flops per GPU / fwd latency:",
        "Aggregated Profile per GPU",
        "Top 2 modules in terms of params, MACs or fwd latency at different model depths:",
        "depth 0:", "depth 4:", "    params      - {'GPT': '", "Detailed Profile per GPU",
        "GPT(\n"}) {
    EXPECT_NE(report.find(line), std::string::npos) << "missing: " << line << "\n" << report;
  }
  EXPECT_NE(report.find("fwd MACs per GPU: "), std::string::npos);
  EXPECT_NE(report.find(dsp::macs_to_string(static_cast<double>(prof.get_total_macs()))),
            std::string::npos);
  EXPECT_EQ(report.find("\nbwd latency:"), std::string::npos) << "no engine latencies were given";
  for (const auto& m : prof.module_profiles()) {
    if (m.depth == 0) continue;
    const std::string key =
        m.name.substr(m.name.rfind('.') == std::string::npos ? 0 : m.name.rfind('.') + 1);
    EXPECT_NE(report.find("(" + key + "): " + m.type + "("), std::string::npos) << m.name;
  }
  EXPECT_NE(
      report.find("(qkv): Linear(" +
                  dsp::params_to_string(cfg_.hidden * 3 * cfg_.hidden + 3 * cfg_.hidden) + " = "),
      std::string::npos);
  EXPECT_NE(report.find("in_features=64, out_features=192, bias=true)"), std::string::npos)
      << report;

  o.detailed = false;
  o.module_depth = 2;
  const std::string brief = prof.format_model_profile(o);
  EXPECT_EQ(brief.find("Detailed Profile per GPU"), std::string::npos);
  EXPECT_NE(brief.find("depth 1:"), std::string::npos);
  EXPECT_EQ(brief.find("depth 2:"), std::string::npos);
}

TEST_F(GPTProfile, EngineLatenciesAddTheBackwardLines) {
  dsp::FlopsProfiler prof(model_.ptr(), /*recompute_fwd_factor=*/0.5);
  profile(prof);
  dsp::PrintOptions o;
  dsp::TrainingInfo t;
  t.world_size = 2;
  t.dp_world_size = 2;
  t.micro_batch_size = 2;
  t.samples_per_iter = 4;
  t.fwd_latency = 0.5;
  t.bwd_latency = 1.0;
  t.step_latency = 0.5;
  o.training = t;
  const std::string report = prof.format_model_profile(o);
  for (const char* line :
       {"world size:", "data parallel size:", "batch size per GPU:", "bwd latency:", "1 s",
        "bwd FLOPS per GPU = 2.5 * fwd flops per GPU / bwd latency:",
        "fwd+bwd FLOPS per GPU = 3.5 * fwd flops per GPU / (fwd+bwd latency):", "step latency:",
        "iter latency:", "2 s", "samples/second:", "2.00"}) {
    EXPECT_NE(report.find(line), std::string::npos) << "missing: " << line << "\n" << report;
  }
  EXPECT_NE(
      report.find(dsp::flops_to_string(2.5 * static_cast<double>(prof.get_total_flops()) / 1.0)),
      std::string::npos);
}

TEST_F(GPTProfile, PrintsToTheOutputFile) {
  ds_test::TempDir dir("ds_flops_profiler");
  dsp::FlopsProfiler prof(model_.ptr());
  profile(prof);
  dsp::PrintOptions o;
  o.output_file = dir.file("sub/profile.txt");
  prof.print_model_profile(o);
  std::ifstream in(*o.output_file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), prof.format_model_profile(o));
  prof.end_profile();
  EXPECT_EQ(prof.get_total_flops(), 0);
  EXPECT_EQ(prof.format_model_profile(o), "") << "nothing to print after end_profile";
}

TEST_F(GPTProfile, GetModelProfileRunsTheForwardInEvalMode) {
  model_->train();
  const auto result = dsp::get_model_profile(
      model_.ptr(), [&] { model_->forward(tokens_, targets_); },
      [] {
        dsp::ModelProfileOptions o;
        o.print_profile = false;
        return o;
      }());
  const gpt_flops::Count want = gpt_flops::forward(cfg_, kBatch);
  EXPECT_EQ(result.flops, want.flops);
  EXPECT_EQ(result.macs, want.macs);
  EXPECT_EQ(result.params, cfg_.num_parameters());
  EXPECT_TRUE(model_->is_training()) << "the training flag is restored";
}

}  // namespace
