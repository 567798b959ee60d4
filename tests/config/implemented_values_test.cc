// Keys whose value selects behaviour deepspeed-cpp implements one way only: each loads at the
// value we implement (and when absent) and is refused by JSON path at the other.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "deepspeed/config.h"
#include "config_error.h"

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
      {zero(2, R"("use_multi_rank_bucket_allreduce": false)"),
       zero(2, R"("use_multi_rank_bucket_allreduce": true)"),
       "zero_optimization.use_multi_rank_bucket_allreduce: true (all-reduce each bucket across "
       "ranks) is not implemented"},
      {zero(1, R"("load_from_fp32_weights": true)"), zero(1, R"("load_from_fp32_weights": false)"),
       "zero_optimization.load_from_fp32_weights: false"},
      {zero(2, R"("ignore_unused_parameters": true)"),
       zero(2, R"("ignore_unused_parameters": false)"),
       "zero_optimization.ignore_unused_parameters: false"},
      {zero(3, R"("memory_efficient_linear": true)"),
       zero(3, R"("memory_efficient_linear": false)"),
       "zero_optimization.memory_efficient_linear: false is not implemented"},
      {zero(3, R"("pipeline_loading_checkpoint": false)"),
       zero(3, R"("pipeline_loading_checkpoint": true)"),
       "zero_optimization.pipeline_loading_checkpoint: true"},
      {zero(3, R"("override_module_apply": false)"), zero(3, R"("override_module_apply": true)"),
       "zero_optimization.override_module_apply: true is not implemented"},
      {zero(3, R"("enable_sanity_checks": false)"), zero(3, R"("enable_sanity_checks": true)"),
       "zero_optimization.enable_sanity_checks: true"},
      {zero(3, R"("mics_hierarchical_params_gather": false)"),
       zero(3, R"("mics_hierarchical_params_gather": true)"),
       "zero_optimization.mics_hierarchical_params_gather: true is not implemented"},
      {R"({"aio": {"use_gds": false}})", R"({"aio": {"use_gds": true}})",
       "aio.use_gds: true needs GPUDirect Storage, which deepspeed-cpp does not have"},
      {R"({"checkpoint": {"tag_validation": "FAIL"}})",
       R"({"checkpoint": {"tag_validation": "Warn"}})",
       "checkpoint.tag_validation: \"Warn\" is not implemented"},
      {R"({"checkpoint": {"tag_validation": "Fail"}})",
       R"({"checkpoint": {"tag_validation": "ignore"}})",
       "checkpoint.tag_validation: \"Ignore\" is not implemented"},
      {R"({"checkpoint": {"use_node_local_storage": false}})",
       R"({"checkpoint": {"use_node_local_storage": true}})",
       "checkpoint.use_node_local_storage: true"},
      {R"({"checkpoint": {"parallel_write": {"pipeline_stage": false}}})",
       R"({"checkpoint": {"parallel_write": {"pipeline_stage": true}}})",
       "checkpoint.parallel_write.pipeline_stage: true"},
      {R"({"dataloader_drop_last": true})", R"({"dataloader_drop_last": false})",
       "dataloader_drop_last: false is not implemented"},
      {R"({"use_data_before_expert_parallelism": false})",
       R"({"use_data_before_expert_parallelism": true})",
       "use_data_before_expert_parallelism: true is not implemented"},
      {R"({"zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": false})",
       R"({"zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": true})",
       "zero_allow_untested_optimizer: true is not implemented"},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "zero_force_ds_cpu_optimizer": true})",
       R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "zero_force_ds_cpu_optimizer": false})",
       "zero_force_ds_cpu_optimizer: false is not implemented"},
      {R"({"optimizer": {"type": "Adam", "params": {"torch_adam": false}}})",
       R"({"optimizer": {"type": "Adam", "params": {"torch_adam": true}}})",
       "optimizer.params.torch_adam: true (run torch.optim.Adam instead of the fused kernel) is "
       "not "
       "implemented"},
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

}  // namespace
}  // namespace deepspeed::config
