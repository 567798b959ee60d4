// Issue 56: what DeepSpeed 0.19.8 goes on past, we go on past with a warning naming the key; what it refuses, we
// refuse by name. Each case was checked against DeepSpeedConfig in the venv (tests/config/deepspeed_verdict.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "config/feature_gate.h"
#include "config_error.h"
#include "deepspeed/config.h"

namespace deepspeed::config {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// DeepSpeed reads these as plain dicts: an unknown key is a warning line naming it, and the rest is read.
TEST(DeepSpeedLeniency, SectionsDeepSpeedReadsAsDictsWarnAndGoOn) {
  const Config c = Config::from_string(R"({"train_batch_size": 8, "_comment": "ours", "comms_config": {"verbose": 0},
      "aio": {"block_size": 2097152, "foo": 1}, "activation_checkpointing": {"bar": 1},
      "checkpoint": {"baz": 1}, "data_types": {"qux": 1}, "flops_profiler": {"x": 1}, "pipeline": {"y": 1},
      "timers": {"z": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}, "note": 1},
      "scheduler": {"type": "WarmupLR", "params": {}, "note": 1}})");
  EXPECT_EQ(c.aio.block_size, 2097152);
  ASSERT_EQ(c.warnings().size(), 11u);
  for (const char* key :
       {"_comment", "comms_config", "aio.foo", "activation_checkpointing.bar", "checkpoint.baz", "data_types.qux",
        "flops_profiler.x", "pipeline.y", "timers.z", "optimizer.note", "scheduler.note"}) {
    bool named = false;
    for (const auto& w : c.warnings()) named = named || w.rfind(std::string(key) + ": unknown key, ignored", 0) == 0;
    EXPECT_TRUE(named) << key;
  }
}

// DeepSpeed's pydantic sections forbid extra keys: refused by name, as there.
TEST(DeepSpeedLeniency, SectionsDeepSpeedValidatesRefuseUnknownKeys) {
  for (const auto& [json, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"bf16": {"enabled": true, "auto_cast": true}})", "bf16.auto_cast: unknown key"},
           {R"({"zero_optimization": {"stage": 3, "foo": 1}})", "zero_optimization.foo: unknown key"},
           {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "foo": 1}}})",
            "zero_optimization.offload_optimizer.foo: unknown key"},
           {R"({"tensorboard": {"enabled": false, "foo": 1}})", "tensorboard.foo: unknown key"},
           {R"({"timers": {"throughput": {"foo": 1}}})", "timers.throughput.foo: unknown key"},
           {R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.001, "foo": 1}}})", "optimizer.params.foo"}}) {
    try {
      Config::from_string(json);
      ADD_FAILURE() << json << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), StartsWith(key)) << json;
    }
  }
}

// Values DeepSpeed gives a meaning get it here.
TEST(DeepSpeedLeniency, ValuesDeepSpeedTakes) {
  // pydantic's lax booleans (Open-Assistant writes "enabled": "true").
  EXPECT_TRUE(Config::from_string(R"({"fp16": {"enabled": "true"}})").fp16.enabled);
  EXPECT_FALSE(Config::from_string(R"({"bf16": {"enabled": "False"}})").bf16.enabled);
  EXPECT_THAT(error_of(R"({"bf16": {"enabled": "maybe"}})"), HasSubstr("bf16.enabled: expected true or false"));
  // Where DeepSpeed reads a plain dict, any non-empty string is true to it ("false" included): refused, not guessed.
  EXPECT_THAT(error_of(R"({"prescale_gradients": "false"})"), StartsWith("prescale_gradients: expected true or false"));
  EXPECT_THAT(error_of(R"({"activation_checkpointing": {"partition_activations": "false"}})"),
              StartsWith("activation_checkpointing.partition_activations: expected true or false"));
  // "auto" only where accelerate fills it.
  EXPECT_THAT(error_of(R"({"zero_optimization": {"stage": 3, "stage3_use_all_reduce_for_fetch_params": "auto"}})"),
              HasSubstr("expected true or false"));
  // offload_param below stage 3: DeepSpeed ignores it; a warning, and nothing offloaded.
  const Config stage0 =
      Config::from_string(R"({"zero_optimization": {"stage": 0, "offload_param": {"device": "cpu"}}})");
  EXPECT_FALSE(stage0.zero.offload_param.enabled());
  ASSERT_EQ(stage0.warnings().size(), 1u);
  EXPECT_THAT(stage0.warnings()[0], StartsWith("zero_optimization.offload_param: ignored below stage 3"));
  // Permissions for client optimizers and the torch Adam implementation: accepted (the same update).
  EXPECT_EQ(rejection(R"({"zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": true,
                        "optimizer": {"type": "Adam", "params": {"lr": 0.001, "torch_adam": true}}})"),
            "");
  // round_robin_gradients: the same update; refused only where a DeepSpeed-layout checkpoint would have to follow it.
  EXPECT_EQ(rejection(R"({"zero_optimization": {"stage": 2, "round_robin_gradients": true}})"), "");
  EXPECT_THAT(rejection(R"({"zero_optimization": {"stage": 2, "round_robin_gradients": true},
                          "checkpoint": {"save_layout": "python_deepspeed"}})"),
              StartsWith("zero_optimization.round_robin_gradients"));
  // stage3_gather_16bit_weights_on_model_save "auto": accelerate's default, false.
  Config gather = Config::from_string(
      R"({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto"}})");
  gather.resolve_auto({});
  EXPECT_FALSE(gather.zero.gather_16bit_weights_on_model_save);
}

// "auto" precision filled from the model is checked as if it had been written: against the other flag and
// tensor_parallel.dtype, which are not refused before the model's dtype is known.
TEST(DeepSpeedLeniency, AutoPrecisionIsCheckedOnceFilled) {
  AutoValues bf16_model;
  bf16_model.model_dtype = DataType::kBf16;
  Config both = Config::from_string(R"({"fp16": {"enabled": true}, "bf16": {"enabled": "auto"}})");
  try {
    both.resolve_auto(bf16_model);
    ADD_FAILURE() << "fp16 and bf16 both on";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), StartsWith("bf16.enabled: cannot be true together with fp16.enabled"));
  }
  const std::string tp = R"({"tensor_parallel": {"autotp_size": 2, "dtype": "bf16"}, "bf16": {"enabled": "auto"}})";
  Config agrees = Config::from_string(tp);
  agrees.resolve_auto(bf16_model);
  EXPECT_TRUE(agrees.bf16.enabled);
  Config disagrees = Config::from_string(tp);
  AutoValues fp32_model;
  fp32_model.model_dtype = DataType::kFp32;
  EXPECT_THROW(disagrees.resolve_auto(fp32_model), ConfigError);
}

}  // namespace
}  // namespace deepspeed::config
