// Config keys DeepSpeed accepts with a warning get the same warning here, once, on rank 0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// zero_optimization.elastic_checkpoint shapes stages 1-2's DeepSpeed-layout files; at stage 3 DeepSpeed warns that
// it is no longer supported.
TEST(EngineWarnings, ElasticCheckpointAtStageThreeIsDeprecatedAsInDeepSpeed) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  for (int stage : {2, 3}) {
    auto net = std::make_shared<torch::nn::LinearImpl>(8, 2);
    ::testing::internal::CaptureStderr();
    auto engine = deepspeed::initialize(
        net, deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
                 "params": {"lr": 0.01}}, "zero_optimization": {"elastic_checkpoint": true, "stage": )" +
                                            std::to_string(stage) + "}}"));
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::string warning = "deepspeed: warning: zero_optimization.elastic_checkpoint: ZeRO-3 elastic "
                                "checkpointing is deprecated and no longer supported";
    if (stage == 3) {
      EXPECT_THAT(err, HasSubstr(warning));
    } else {
      EXPECT_THAT(err, Not(HasSubstr(warning)));
    }
  }
}

// A section DeepSpeed's config accepts but its checkpointing.configure() would refuse (real configs carry
// contiguous_memory_optimization without number_checkpoints) starts the engine with a warning, as DeepSpeed starts
// without applying it.
TEST(EngineWarnings, ActivationCheckpointingDeepSpeedWouldNotConfigureStartsWithAWarning) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  auto net = std::make_shared<torch::nn::LinearImpl>(8, 2);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(deepspeed::initialize(
      net, deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW",
               "params": {"lr": 0.01}}, "activation_checkpointing": {"partition_activations": true,
               "contiguous_memory_optimization": true}})")));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("deepspeed: warning: activation_checkpointing.number_checkpoints: required with "
                        "contiguous_memory_optimization"));
}

}  // namespace
