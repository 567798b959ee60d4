// checkpoint.save_layout "python_deepspeed" writes what Python DeepSpeed's layout can hold (fp32/bf16, the config's
// Adam/AdamW): anything else is refused when the engine is built, naming the key, not at the first save. The
// layout itself is checked against DeepSpeed in tests/checkpoint/crossover_test.py. Single process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"

namespace {

using ::testing::HasSubstr;

std::shared_ptr<torch::nn::LinearImpl> model() {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  return std::make_shared<torch::nn::LinearImpl>(8, 8);
}

std::string config(const std::string& optimizer, const std::string& precision) {
  return R"({"train_micro_batch_size_per_gpu": 2, "checkpoint": {"save_layout": "python_deepspeed"},
             "optimizer": )" + optimizer + ", " + precision + "}";
}

std::string refusal(const std::string& json) {
  try {
    deepspeed::initialize(model(), deepspeed::Config::from_string(json));
  } catch (const deepspeed::ConfigError& e) {
    return e.what();
  }
  return "(built)";
}

TEST(EngineSaveLayout, AdamInFp32AndBf16IsAccepted) {
  const std::string adam = R"({"type": "AdamW", "params": {"lr": 0.01}})";
  EXPECT_NO_THROW(deepspeed::initialize(model(), deepspeed::Config::from_string(
                                                     config(adam, R"("bf16": {"enabled": false})"))));
  EXPECT_NO_THROW(deepspeed::initialize(model(), deepspeed::Config::from_string(
                                                     config(adam, R"("bf16": {"enabled": true})"))));
}

TEST(EngineSaveLayout, WhatDeepSpeedsLayoutCannotHoldIsRefusedByName) {
  EXPECT_THAT(refusal(config(R"({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}})",
                             R"("bf16": {"enabled": false})")),
              HasSubstr("checkpoint.save_layout: python_deepspeed needs the config's Adam or AdamW optimizer"));
  EXPECT_THAT(refusal(config(R"({"type": "AdamW", "params": {"lr": 0.01}})", R"("fp16": {"enabled": true})")),
              HasSubstr("checkpoint.save_layout: python_deepspeed writes fp32 and bf16 checkpoints; fp16 is not "
                        "supported"));
}

}  // namespace
