// initialize() resolves a config's "auto" values from InitializeOptions::auto_values (and
// total_steps), as DeepSpeed's Hugging Face integration does, and refuses the ones it cannot fill
// by name instead of running with DeepSpeed's defaults. Single process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"

namespace {

using ::testing::HasSubstr;

const char kAutoConfig[] = R"({
  "train_micro_batch_size_per_gpu": 2,
  "gradient_clipping": "auto",
  "zero_optimization": {"stage": 1, "reduce_bucket_size": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                           "warmup_num_steps": 2, "total_num_steps": "auto"}}})";

std::shared_ptr<torch::nn::LinearImpl> model() {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  return std::make_shared<torch::nn::LinearImpl>(8, 8);
}

TEST(EngineAutoValues, FilledFromInitializeOptions) {
  deepspeed::InitializeOptions options;
  options.auto_values.hidden_size = 48;
  options.auto_values.lr = 0.02;
  options.auto_values.gradient_clipping = 0.25;
  options.total_steps = 40;
  auto engine =
      deepspeed::initialize(model(), deepspeed::Config::from_string(kAutoConfig), options);
  const deepspeed::Config& c = engine.config();
  EXPECT_EQ(c.zero.reduce_bucket_size, 48 * 48);
  EXPECT_EQ(c.gradient_clipping, 0.25);
  EXPECT_EQ(c.optimizer->params.get_number("lr", 0), 0.02);
  EXPECT_EQ(c.scheduler->params.get_number("warmup_max_lr", 0), 0.02);
  EXPECT_EQ(c.scheduler->params.get_int("total_num_steps", 0), 40);  // from total_steps
  EXPECT_TRUE(c.auto_keys().empty());
}

TEST(EngineAutoValues, UnfilledAutoIsRefusedByName) {
  deepspeed::InitializeOptions options;
  options.auto_values.lr = 0.02;
  options.auto_values.gradient_clipping = 0.25;
  options.total_steps = 40;
  try {
    deepspeed::initialize(model(), deepspeed::Config::from_string(kAutoConfig), options);
    FAIL() << "an \"auto\" bucket size without a hidden size must not fall back to 5e8";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("zero_optimization.reduce_bucket_size: \"auto\" needs the model's "
                          "hidden size"));
  }
}

}  // namespace
