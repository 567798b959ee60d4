// The ds_config of a trial and of the winner: the candidate's knobs set, batch keys consistent,
// the engine told where to write the metric, every other user key kept; and our own config parser
// accepts the result.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "autotuning_test_util.h"
#include "config/feature_gate.h"
#include "deepspeed/config.h"

namespace deepspeed::autotuning {
namespace {

using Json = nlohmann::ordered_json;
using testing::error_of;
using zero::OffloadTarget;

Json user_config() {
  return Json::parse(R"({
    "train_batch_size": 32,
    "steps_per_print": 7,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "bf16": {"enabled": true},
    "zero_optimization": {
      "stage": 1,
      "reduce_bucket_size": 1000,
      "cpu_offload": true,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true}
    },
    "autotuning": {"enabled": false, "metric": "latency", "tuner_type": "random"}
  })");
}

Candidate candidate(int stage, int64_t mbs, int64_t gas, OffloadTarget opt = OffloadTarget::kNone,
                    OffloadTarget param = OffloadTarget::kNone) {
  Candidate c;
  c.zero_stage = stage;
  c.micro_batch = mbs;
  c.gradient_accumulation = gas;
  c.offload_optimizer = opt;
  c.offload_param = param;
  return c;
}

TEST(TrialConfig, SetsConsistentBatchKeysAndKeepsUnrelatedKeys) {
  const Json cfg = trial_config(user_config(), candidate(2, 8, 3), 4, "/exps/z2/metrics.json");
  EXPECT_EQ(cfg["train_batch_size"], 8 * 3 * 4);
  EXPECT_EQ(cfg["train_micro_batch_size_per_gpu"], 8);
  EXPECT_EQ(cfg["gradient_accumulation_steps"], 3);
  EXPECT_EQ(cfg["steps_per_print"], 7);
  EXPECT_EQ(cfg["optimizer"], user_config()["optimizer"]);
  EXPECT_EQ(cfg["bf16"], user_config()["bf16"]);
  EXPECT_EQ(cfg["zero_optimization"]["reduce_bucket_size"], 1000);
  EXPECT_EQ(cfg["autotuning"]["tuner_type"], "random");
  // The user's keys keep their order; ours come after them.
  EXPECT_EQ(cfg.begin().key(), "train_batch_size");
  EXPECT_EQ((++cfg.begin()).key(), "steps_per_print");
}

TEST(TrialConfig, SetsStageAndOffload) {
  Json cfg = trial_config(user_config(), candidate(2, 1, 1), 1, "m.json");
  EXPECT_EQ(cfg["zero_optimization"]["stage"], 2);
  EXPECT_FALSE(cfg["zero_optimization"].contains("offload_optimizer"));
  EXPECT_FALSE(cfg["zero_optimization"].contains("cpu_offload"));  // would turn offload back on

  cfg = trial_config(user_config(), candidate(3, 1, 1, OffloadTarget::kCpu, OffloadTarget::kCpu), 1,
                     "m.json");
  EXPECT_EQ(cfg["zero_optimization"]["stage"], 3);
  EXPECT_EQ(cfg["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ(cfg["zero_optimization"]["offload_optimizer"]["pin_memory"], true);  // the user's
  EXPECT_EQ(cfg["zero_optimization"]["offload_param"]["device"], "cpu");
}

TEST(TrialConfig, TheUsersOwnOffloadStaysAsWritten) {
  const Json cfg =
      trial_config(user_config(), candidate(2, 1, 1, OffloadTarget::kNvme), 1, "m.json");
  EXPECT_EQ(cfg["zero_optimization"]["offload_optimizer"],
            user_config()["zero_optimization"]["offload_optimizer"]);
  EXPECT_EQ(cfg["zero_optimization"]["stage"], 2);
}

// The user's compute_grad_norm false stays where the engine takes it (stages 1-2 without optimizer offload) and is
// dropped from the other trials, which would otherwise fail at initialize.
TEST(TrialConfig, SkippingTheNormStaysOnlyWhereItIsAllowed) {
  Json user = Json::parse(R"({"train_batch_size": 8, "gradient_clipping": 0,
                              "zero_optimization": {"stage": 1, "compute_grad_norm": false}})");
  for (int stage : {0, 1, 2, 3}) {
    for (OffloadTarget opt : {OffloadTarget::kNone, OffloadTarget::kCpu}) {
      if (stage == 0 && opt != OffloadTarget::kNone) continue;
      const Json cfg = trial_config(user, candidate(stage, 1, 1, opt), 1, "m.json");
      const bool kept = (stage == 1 || stage == 2) && opt == OffloadTarget::kNone;
      EXPECT_EQ(cfg["zero_optimization"].contains("compute_grad_norm"), kept) << "stage " << stage;
      config::check_supported_features(config::Config::from_string(cfg.dump()));  // throws where refused
    }
  }
}

TEST(TrialConfig, TellsTheEngineWhereToWriteTheMetric) {
  Json cfg = trial_config(user_config(), candidate(0, 1, 1), 1, "/exps/z0/metrics.json");
  EXPECT_EQ(cfg["autotuning"]["enabled"], true);
  EXPECT_EQ(cfg["autotuning"]["metric_path"], "/exps/z0/metrics.json");
  EXPECT_EQ(cfg["autotuning"]["metric"], "latency");  // the user's
  EXPECT_EQ(cfg["autotuning"]["start_profile_step"], 3);
  EXPECT_EQ(cfg["autotuning"]["end_profile_step"], 5);

  cfg = trial_config(Json::object(), candidate(0, 2, 1), 2, "m.json");  // no autotuning block
  EXPECT_EQ(cfg["autotuning"]["metric"], "throughput");
  EXPECT_EQ(cfg["train_batch_size"], 4);
}

TEST(TrialConfig, OurParserAcceptsIt) {
  const Json cfg =
      trial_config(user_config(), candidate(3, 4, 2, OffloadTarget::kCpu), 2, "m.json");
  const config::Config parsed = config::Config::from_string(cfg.dump()).resolved(2);
  EXPECT_EQ(*parsed.train_batch_size, 16);
  EXPECT_EQ(*parsed.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(*parsed.gradient_accumulation_steps, 2);
  EXPECT_EQ(parsed.zero.stage, 3);
  EXPECT_EQ(parsed.zero.offload_optimizer.device, config::OffloadDevice::kCpu);
  EXPECT_EQ(parsed.zero.offload_param.device, config::OffloadDevice::kNone);
  EXPECT_TRUE(parsed.autotuning.enabled);
  EXPECT_EQ(parsed.autotuning.metric_path, std::optional<std::string>("m.json"));
  EXPECT_EQ(parsed.autotuning.metric, "latency");

  // Partial offload (ratio < 1) is stage 3 only: dropped below it so the parser still accepts it.
  Json user = user_config();
  user["zero_optimization"]["offload_optimizer"]["ratio"] = 0.5;
  const Json z1 = trial_config(user, candidate(1, 4, 2, OffloadTarget::kCpu), 2, "m.json");
  EXPECT_EQ(config::Config::from_string(z1.dump()).zero.offload_optimizer.device,
            config::OffloadDevice::kCpu);
}

TEST(OptimalConfig, IsTheTrialConfigWithoutProfiling) {
  const Candidate c = candidate(2, 8, 1, OffloadTarget::kCpu);
  const Json best = optimal_config(user_config(), c, 4);
  Json expected = trial_config(user_config(), c, 4, "unused");
  expected["autotuning"]["enabled"] = false;
  expected["autotuning"].erase("metric_path");
  EXPECT_EQ(best, expected);
  EXPECT_FALSE(config::Config::from_string(best.dump()).autotuning.enabled);
}

TEST(TrialConfig, BadArguments) {
  EXPECT_EQ(error_of([] { trial_config(Json::array(), candidate(0, 1, 1), 1, "m"); }),
            "trial_config: the user's ds_config must be a JSON object, got array");
  EXPECT_EQ(error_of([] { trial_config(Json::object(), candidate(0, 1, 1), 0, "m"); }),
            "trial_config: world_size must be >= 1, got 0");
  EXPECT_EQ(error_of([] {
              trial_config(Json::object(),
                           candidate(2, 1, 1, OffloadTarget::kNone, OffloadTarget::kCpu), 1, "m");
            }),
            "trial_config: z2_mbs1_gas1_offparam-cpu: parameter offload needs ZeRO stage 3");
}

}  // namespace
}  // namespace deepspeed::autotuning
