// Config::resolve_auto: "auto" filled as DeepSpeed's Hugging Face integration fills it, from what
// the program gives in AutoValues, and every other "auto" refused by JSON path with what to put.
// Also the batch keys' "auto" message and Config::from_file's overrides (ds_check_config --set).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "deepspeed/config.h"
#include "temp_dir.h"

namespace deepspeed::config {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string resolve_error(Config c, const AutoValues& known) {
  try {
    c.resolve_auto(known);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const char kZero3[] = R"({
  "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                        "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto"}})";

TEST(AutoValues, BucketSizesFromHiddenSizeAsTheIntegration) {
  Config c = Config::from_string(kZero3);
  AutoValues known;
  known.hidden_size = 1000;
  const auto done = c.resolve_auto(known);
  EXPECT_EQ(c.zero.reduce_bucket_size, 1000000);         // hidden^2
  EXPECT_EQ(c.zero.prefetch_bucket_size, 900000);        // int(0.9 * hidden^2)
  EXPECT_EQ(c.zero.param_persistence_threshold, 10000);  // 10 * hidden
  EXPECT_TRUE(c.auto_keys().empty());
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].path, "zero_optimization.reduce_bucket_size");
  EXPECT_EQ(done[0].value, "1000000");
  EXPECT_EQ(done[0].how, "hidden_size^2, hidden_size 1000");
  // dump() no longer writes "auto" for them.
  EXPECT_THAT(c.dump(), HasSubstr("\"reduce_bucket_size\": 1000000"));
}

TEST(AutoValues, PrefetchTruncatesLikePythonInt) {
  // 0.9 * 63 * 63 = 3572.1 -> 3572; an odd hidden size shows the truncation.
  Config c = Config::from_string(kZero3);
  AutoValues known;
  known.hidden_size = 63;
  c.resolve_auto(known);
  EXPECT_EQ(c.zero.prefetch_bucket_size, 3572);
  EXPECT_EQ(c.zero.reduce_bucket_size, 3969);
  EXPECT_EQ(c.zero.param_persistence_threshold, 630);
}

TEST(AutoValues, HiddenSizeMissingNamesTheKeyAndTheWayToGiveIt) {
  const std::string e = resolve_error(Config::from_string(kZero3), {});
  EXPECT_THAT(e, StartsWith("zero_optimization.reduce_bucket_size: \"auto\" needs the model's "
                            "hidden size: pass it as InitializeOptions::auto_values.hidden_size "
                            "(ds_check_config --hidden_size N), or put a number here"));
  // The other refused keys are named too, on the same line.
  EXPECT_THAT(e, HasSubstr("(also \"auto\": zero_optimization.stage3_param_persistence_threshold, "
                           "zero_optimization.stage3_prefetch_bucket_size)"));
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(AutoValues, FailedResolutionLeavesTheConfigUnchanged) {
  Config c = Config::from_string(
      R"({"gradient_clipping": "auto", "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})");
  AutoValues known;
  known.gradient_clipping = 0.5;
  EXPECT_THROW(c.resolve_auto(known), ConfigError);  // reduce_bucket_size needs the hidden size
  EXPECT_TRUE(c.is_auto("gradient_clipping"));
  EXPECT_EQ(c.gradient_clipping, 1.0);  // the default, not the 0.5 the failed resolution would have filled
}

TEST(AutoValues, Stage3KeysBelowStage3KeepDefaults) {
  Config c = Config::from_string(
      R"({"zero_optimization": {"stage": 2, "stage3_prefetch_bucket_size": "auto",
                                "stage3_max_live_parameters": "auto"}})");
  const auto done = c.resolve_auto({});
  EXPECT_EQ(c.zero.prefetch_bucket_size, 50000000);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].how, "not used below stage 3: DeepSpeed's default kept");
}

TEST(AutoValues, Stage3KeysWithoutAFormulaAreRefusedAtStage3) {
  Config c = Config::from_string(
      R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": "auto"}})");
  EXPECT_EQ(resolve_error(c, {}),
            "zero_optimization.stage3_max_live_parameters: \"auto\" deepspeed-cpp has no value to "
            "fill it from; put a number, e.g. 1000000000 (DeepSpeed's default)");
  EXPECT_THAT(
      resolve_error(
          Config::from_string(R"({"zero_optimization": {"allgather_bucket_size": "auto"}})"), {}),
      StartsWith("zero_optimization.allgather_bucket_size: \"auto\" deepspeed-cpp has no "
                 "value to fill it from; put a number, e.g. 500000000"));
}

TEST(AutoValues, ClippingAndLearningRateFromTheProgram) {
  Config c = Config::from_string(R"({
    "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                             "total_num_steps": "auto", "warmup_num_steps": 10}}})");
  AutoValues known;
  known.gradient_clipping = 0.5;
  known.lr = 3e-4;
  known.total_num_steps = 200;
  c.resolve_auto(known);
  EXPECT_EQ(c.gradient_clipping, 0.5);
  EXPECT_EQ(c.optimizer->params.get_number("lr", 0), 3e-4);
  EXPECT_EQ(c.scheduler->params.get_number("warmup_max_lr", 0), 3e-4);
  EXPECT_EQ(c.scheduler->params.get_number("warmup_min_lr", 1), 0.0);
  EXPECT_EQ(c.scheduler->params.get_int("total_num_steps", 0), 200);
  EXPECT_EQ(c.optimizer->params.get_number("weight_decay", 0), 0.1);  // given values untouched
}

// What the program does not say takes the value Hugging Face's Trainer fills with its default TrainingArguments
// (transformers' TrainingArguments: max_grad_norm 1.0, learning_rate 5e-5, adam_beta1/2 0.9/0.999, adam_epsilon 1e-8,
// weight_decay 0, warmup_steps 0, per_device_train_batch_size 8, no --fp16/--bf16), one line each saying so.
TEST(AutoValues, WhatTheProgramDoesNotSayTakesTheTrainersDefaults) {
  Config c = Config::from_string(R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR",
                  "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"}}})");
  const auto done = c.resolve_auto({});
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_EQ(c.optimizer->params.get_number("lr", 0), 5e-5);
  EXPECT_EQ(c.optimizer->params.get_number_list("betas", {}), (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(c.optimizer->params.get_number("eps", 0), 1e-8);
  EXPECT_EQ(c.optimizer->params.get_number("weight_decay", 1), 0.0);
  EXPECT_EQ(c.scheduler->params.get_number("warmup_max_lr", 0), 5e-5);
  EXPECT_EQ(c.scheduler->params.get_number("warmup_num_steps", 1), 0.0);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  c.resolve_batch(2);
  EXPECT_EQ(c.train_batch_size, 16);
  bool said = false;
  for (const auto& r : done)
    said = said ||
           (r.path == "gradient_clipping" && r.value == "1" && r.how == "Hugging Face Trainer's default max_grad_norm");
  EXPECT_TRUE(said) << "each default is said, with where it came from";
  // The model's dtype picks the precision, as --bf16 would.
  Config bf = Config::from_string(R"({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})");
  AutoValues model;
  model.model_dtype = DataType::kBf16;
  bf.resolve_auto(model);
  EXPECT_TRUE(bf.bf16.enabled);
  EXPECT_FALSE(bf.fp16.enabled);
  AutoValues negative;
  negative.lr = -1e-3;
  EXPECT_THAT(resolve_error(Config::from_string(
                                R"({"optimizer": {"type": "Adam", "params": {"lr": "auto"}}})"),
                            negative),
              HasSubstr("must be a number >= 0, got -0.001"));
}

TEST(AutoValues, ValuesWithNoDefaultAreRefusedWithWhatToPut) {
  EXPECT_THAT(resolve_error(Config::from_string(
                                R"({"scheduler": {"type": "WarmupDecayLR",
                                                  "params": {"total_num_steps": "auto"}}})"),
                            {}),
              StartsWith("scheduler.params.total_num_steps: \"auto\" needs the run's optimizer steps"));
  EXPECT_EQ(
      resolve_error(Config::from_string(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": "auto"}}})"), {}),
      "optimizer.params.amsgrad: \"auto\" deepspeed-cpp has no value to fill it from; put a "
      "value, e.g. false (DeepSpeed's default)");
}

TEST(AutoValues, NoAutoNothingToDo) {
  Config c = Config::from_string(R"({"train_batch_size": 8, "gradient_clipping": 1.0})");
  EXPECT_TRUE(c.resolve_auto({}).empty());
}

TEST(AutoBatch, AllAutoBatchSaysSoInsteadOfMustBeGiven) {
  Config c = Config::from_string(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
          "gradient_accumulation_steps": "auto"})");
  EXPECT_EQ(c.auto_batch_keys().size(), 3u);
  try {
    c.resolve_batch(2);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "train_micro_batch_size_per_gpu: \"auto\" is filled by Hugging Face's Trainer, "
        "which deepspeed-cpp does not have, and the other batch keys cannot solve it; give "
        "a number (ds_check_config: --set train_micro_batch_size_per_gpu=N)");
  }
  // Absent keys keep the old message.
  EXPECT_THROW(Config::from_string("{}").resolve_batch(1), ConfigError);
  try {
    Config::from_string("{}").resolve_batch(1);
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("must be given"));
  }
}

TEST(ConfigOverrides, SetValuesBeforeValidation) {
  ds_test::TempDir dir("ds_overrides");
  const std::string path = dir.file("hf.json");
  std::ofstream(path) << R"({"train_micro_batch_size_per_gpu": "auto",
                             "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})";
  Config c = Config::from_file(path, {"train_micro_batch_size_per_gpu=4",
                                      "optimizer.params.lr=3e-4", "zero_optimization.stage=2",
                                      "optimizer.type=Adam", "optimizer.params.betas=[0.8, 0.9]"});
  EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.optimizer->params.get_number("lr", 0), 3e-4);
  EXPECT_EQ(c.zero.stage, 2);            // a new section is created on the way
  EXPECT_EQ(c.optimizer->type, "adam");  // a plain string needs no JSON quotes
  EXPECT_EQ(c.optimizer->params.get_number_list("betas", {}), (std::vector<double>{0.8, 0.9}));
  EXPECT_TRUE(c.auto_batch_keys().empty());
}

TEST(ConfigOverrides, BadOverridesAreNamed) {
  ds_test::TempDir dir("ds_overrides");
  const std::string path = dir.file("ds.json");
  std::ofstream(path) << R"({"train_batch_size": 8, "fp16": {"enabled": true}})";
  auto error = [&](const std::string& o) {
    try {
      Config::from_file(path, {o});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error("train_batch_size"), "--set train_batch_size: expected KEY=VALUE");
  EXPECT_EQ(error("fp16..enabled=true"),
            "--set fp16..enabled=true: empty key in the dotted path 'fp16..enabled'");
  EXPECT_EQ(error("train_batch_size.x=1"),
            "--set train_batch_size.x=1: train_batch_size is 8, not an object");
  // Values are checked like the file's own, and their errors name the file.
  EXPECT_EQ(error("zero_optimization.stage=7"),
            path + ": zero_optimization.stage: expected an integer in 0..3, got 7");
  EXPECT_THAT(error("optimizer.params.lr=0.1"), StartsWith(path + ": optimizer.type: required"));
}

}  // namespace
}  // namespace deepspeed::config
