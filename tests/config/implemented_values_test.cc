// Keys whose value selects behaviour deepspeed-cpp implements one way only: each loads at the
// value we implement (and when absent) and is refused by JSON path at the other.
#include "config/implemented_values.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config_error.h"
#include "deepspeed/config.h"

namespace deepspeed::config {
namespace {

using ::testing::StartsWith;

struct Case {
  std::string accepted;  // a config with the value we implement
  std::string refused;   // the same with the other value
  std::string message;   // how the refusal starts
};

std::string zero(int stage, const std::string& extra) {
  return R"({"zero_optimization": {"stage": )" + std::to_string(stage) + ", " + extra + "}}";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {zero(2, R"("use_multi_rank_bucket_allreduce": false)"), zero(2, R"("use_multi_rank_bucket_allreduce": true)"),
       "zero_optimization.use_multi_rank_bucket_allreduce: true (all-reduce each bucket across "
       "ranks) is not implemented"},
      {zero(1, R"("load_from_fp32_weights": true)"), zero(1, R"("load_from_fp32_weights": false)"),
       "zero_optimization.load_from_fp32_weights: false"},
      {zero(2, R"("ignore_unused_parameters": true)"), zero(2, R"("ignore_unused_parameters": false)"),
       "zero_optimization.ignore_unused_parameters: false"},
      {zero(3, R"("memory_efficient_linear": true)"), zero(3, R"("memory_efficient_linear": false)"),
       "zero_optimization.memory_efficient_linear: false is not implemented"},
      {zero(3, R"("pipeline_loading_checkpoint": false)"), zero(3, R"("pipeline_loading_checkpoint": true)"),
       "zero_optimization.pipeline_loading_checkpoint: true"},
      {zero(3, R"("override_module_apply": false)"), zero(3, R"("override_module_apply": true)"),
       "zero_optimization.override_module_apply: true is not implemented"},
      {zero(3, R"("enable_sanity_checks": false)"), zero(3, R"("enable_sanity_checks": true)"),
       "zero_optimization.enable_sanity_checks: true"},
      {zero(3, R"("mics_hierarchical_params_gather": false)"), zero(3, R"("mics_hierarchical_params_gather": true)"),
       "zero_optimization.mics_hierarchical_params_gather: true is not implemented"},
      {R"({"aio": {"use_gds": false}})", R"({"aio": {"use_gds": true}})",
       "aio.use_gds: true needs GPUDirect Storage, which deepspeed-cpp does not have"},
      {R"({"checkpoint": {"tag_validation": "FAIL"}})", R"({"checkpoint": {"tag_validation": "Warn"}})",
       "checkpoint.tag_validation: \"Warn\" is not implemented"},
      {R"({"checkpoint": {"tag_validation": "Fail"}})", R"({"checkpoint": {"tag_validation": "ignore"}})",
       "checkpoint.tag_validation: \"Ignore\" is not implemented"},
      {R"({"checkpoint": {"use_node_local_storage": false}})", R"({"checkpoint": {"use_node_local_storage": true}})",
       "checkpoint.use_node_local_storage: true"},
      {R"({"checkpoint": {"parallel_write": {"pipeline_stage": false}}})",
       R"({"checkpoint": {"parallel_write": {"pipeline_stage": true}}})",
       "checkpoint.parallel_write.pipeline_stage: true"},
      {R"({"dataloader_drop_last": true})", R"({"dataloader_drop_last": false})",
       "dataloader_drop_last: false is not implemented"},
      {R"({"use_data_before_expert_parallelism": false})", R"({"use_data_before_expert_parallelism": true})",
       "use_data_before_expert_parallelism: true is not implemented"},
      // DeepSpeed 0.19's keys.
      {zero(2, R"("parameter_alignment": false)"), zero(2, R"("parameter_alignment": true)"),
       "zero_optimization.parameter_alignment: true (pad the flat buffers"},
      {zero(3, R"("leaf_module": {"classes": ["transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock"],
                                   "names": [], "name_suffixes": []})"),
       zero(3, R"("leaf_module": {"names": "blocks.0.moe"})"),
       "zero_optimization.leaf_module: names and name_suffixes are not implemented: mark those modules"},
      {zero(3, R"("leaf_module": {})"), zero(3, R"("leaf_module": {"name_suffixes": ["experts"]})"),
       "zero_optimization.leaf_module: names and name_suffixes"},
      {R"({"managed_gradient_accumulation": true})", R"({"managed_gradient_accumulation": false})",
       "managed_gradient_accumulation: false (the caller manages gradient accumulation) is not implemented"},
      {R"({"bf16": {"enabled": true}, "data_types": {"param_dtype": "bf16"}})",
       R"({"data_types": {"param_dtype": "bf16"}})",
       "data_types.param_dtype: \"bf16\" is not implemented: the parameters train in the fp16/bf16 section's "
       "dtype (fp32 here)"},
      {R"({"data_types": {"param_dtype": "fp32", "buffer_dtype": null}})",
       R"({"data_types": {"buffer_dtype": "fp32"}})", "data_types.buffer_dtype: casting the model's buffers"},
      {R"({"data_types": {"keep_in_fp32_modules": []}})", R"({"data_types": {"keep_in_fp32_modules": ["norm"]}})",
       "data_types.keep_in_fp32_modules: a list of modules to keep in fp32 is not implemented"},
  };
  return kCases;
}

TEST(ImplementedValues, AcceptedAtOurValueRefusedAtTheOther) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.refused);
    EXPECT_EQ(error_of(c.accepted), "");
    const std::string e = error_of(c.refused);
    EXPECT_THAT(e, StartsWith(c.message));
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
}

TEST(ImplementedValues, RefusedOnlyWhereTheValueMatters) {
  // DeepSpeed reads these only at some stages (or with offload); elsewhere any value is what we do.
  EXPECT_EQ(error_of(zero(0, R"("use_multi_rank_bucket_allreduce": true)")), "");
  EXPECT_EQ(error_of(zero(3, R"("use_multi_rank_bucket_allreduce": true)")), "");
  EXPECT_EQ(
      error_of(zero(2, R"("use_multi_rank_bucket_allreduce": true, "reduce_scatter": false)")), "");
  EXPECT_EQ(error_of(zero(2, R"("memory_efficient_linear": false)")), "");
  EXPECT_EQ(error_of(zero(2, R"("override_module_apply": true)")), "");
  EXPECT_EQ(error_of(R"({"zero_allow_untested_optimizer": true})"), "");
  EXPECT_EQ(error_of(R"({"zero_force_ds_cpu_optimizer": false})"), "");
  // In DeepSpeed both only permit a client optimizer beside ZeRO (LLaMA-Factory's and axolotl's configs set them);
  // alone they change nothing, so they are taken at every stage (a client optimizer itself is refused at initialize).
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 3}, "zero_allow_untested_optimizer": true})"), "");
  EXPECT_EQ(error_of(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                         "zero_force_ds_cpu_optimizer": false})"),
            "");
}

// DeepSpeed 0.19 keys of its Python side with nothing to act on here: accepted (README: "Keys accepted with no
// effect"), their types still checked; its sections for features we lack are refused unless switched off.
TEST(ImplementedValues, DeepSpeedKeysWithNothingToActOnAreAcceptedAndTypeChecked) {
  EXPECT_EQ(error_of(R"({"disable_python_gc": true, "log_level": "info", "data_types": {"keep_in_fp32_modules": "auto"},
                         "timers": {"throughput": {"enabled": false, "synchronized": false}},
                         "zero_optimization": {"stage": 3, "save_muon_momentum_buffer_in_memory": true}})"),
            "");
  EXPECT_THAT(error_of(R"({"log_level": 20})"), StartsWith("log_level: expected a string"));
  EXPECT_THAT(error_of(R"({"disable_python_gc": "maybe"})"), StartsWith("disable_python_gc: expected"));
  EXPECT_THAT(error_of(R"({"timers": {"throughput": {"enable": true}}})"),
              StartsWith("timers.throughput.enable: unknown key"));
  EXPECT_THAT(error_of(R"({"data_types": {"keep_in_fp32_modules": "norm"}})"),
              StartsWith("data_types.keep_in_fp32_modules: must be \"auto\" or a list of name patterns"));
  EXPECT_THAT(error_of(R"({"gradient_allreduce_op": "max"})"),
              StartsWith("gradient_allreduce_op: expected one of mean, sum"));
  EXPECT_EQ(error_of(R"({"expert_parallel": {"enabled": false}, "datastates_ckpt": {"enabled": false}})"), "");
  EXPECT_THAT(error_of(R"({"expert_parallel": {"enabled": true, "autoep_size": 2}})"),
              StartsWith("expert_parallel: DeepSpeed's 'expert_parallel' is not supported by deepspeed-cpp"));
  EXPECT_THAT(error_of(R"({"datastates_ckpt": {}})"),
              StartsWith("datastates_ckpt: DeepSpeed's 'datastates_ckpt' is not supported"));
}

TEST(ImplementedValues, DefaultsAreWhatWeDoAndDumpReloads) {
  const Config c = Config::from_string(R"({"zero_optimization": {"stage": 3}})");
  EXPECT_FALSE(c.zero.use_multi_rank_bucket_allreduce);
  EXPECT_FALSE(c.zero.override_module_apply);
  EXPECT_EQ(c.checkpoint.tag_validation, TagValidation::kFail);
  EXPECT_TRUE(c.dataloader_drop_last);
  // Every default loads again from the dump, at every stage.
  for (int stage = 0; stage <= 3; ++stage) {
    const Config s = Config::from_string(zero(stage, R"("contiguous_gradients": true)"));
    EXPECT_NO_THROW(Config::from_string(s.dump())) << "stage " << stage;
  }
}

// Each rule of the table refuses its own example first, with its key and its message (the README's message column
// comes from these examples), and no rule refuses the default config.
TEST(ImplementedValues, EachRuleRefusesItsExampleByItsKey) {
  ASSERT_GE(implemented_value_rules().size(), 20u);
  EXPECT_NO_THROW(check_implemented_values(Config{}));
  for (const Rule& r : implemented_value_rules()) {
    SCOPED_TRACE(r.key);
    std::string error;
    try {
      Config::from_string(r.example);
    } catch (const ConfigError& e) {
      error = e.what();
    }
    EXPECT_EQ(error.rfind(r.key + ": ", 0), 0u) << error;
  }
}

}  // namespace
}  // namespace deepspeed::config
