// Batch-size arithmetic: every combination of given keys, DeepSpeed's solving rules, and the
// arithmetic shown in errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "deepspeed/config.h"

namespace deepspeed::config {
namespace {

using ::testing::HasSubstr;
constexpr std::nullopt_t kUnset = std::nullopt;

std::string error_of(std::optional<int64_t> train, std::optional<int64_t> micro,
                     std::optional<int64_t> gas, int ws) {
  try {
    resolve_batch_sizes(train, micro, gas, ws);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_sizes(const BatchSizes& b, int64_t train, int64_t micro, int64_t gas) {
  EXPECT_EQ(b.train_batch_size, train);
  EXPECT_EQ(b.train_micro_batch_size_per_gpu, micro);
  EXPECT_EQ(b.gradient_accumulation_steps, gas);
}

// Issue 52: 2^63-1 at world size 2 solved to a train_batch_size of -2 and passed; 4294967300^2 wrapped. Every product
// of the batch keys is checked, and the error names the factors.
TEST(BatchConfig, ProductsThatOverflowAreRefusedNamingTheKeys) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(error_of(kUnset, kMax, kUnset, 2),
            "train_micro_batch_size_per_gpu 9223372036854775807 * world size 2 overflows a 64-bit integer: give "
            "batch sizes a machine can run");
  EXPECT_THAT(error_of(kUnset, 4294967300, 4294967300, 1),
              HasSubstr("train_micro_batch_size_per_gpu 4294967300 * gradient_accumulation_steps 4294967300 "
                        "overflows"));
  EXPECT_THAT(error_of(kUnset, 4294967296, 1073741824, 2), HasSubstr("* world size 2 overflows"));
  EXPECT_THAT(error_of(kMax, 2, kUnset, 3), HasSubstr("train_micro_batch_size_per_gpu 2 * world size 3"));
  EXPECT_THAT(error_of(kMax - 1, kUnset, 2, 2), HasSubstr("gradient_accumulation_steps 2 * world size 2"));
  // All three given: the consistency product is checked too, not wrapped into an equality by chance.
  EXPECT_THAT(error_of(0x4000000000000000, 0x2000000000000000, 4, 2), HasSubstr("overflows a 64-bit integer"));
  // The largest product that fits still resolves.
  expect_sizes(resolve_batch_sizes(kUnset, kMax / 2, kUnset, 2), kMax / 2 * 2, kMax / 2, 1);
}

TEST(BatchConfig, AllThreeConsistent) { expect_sizes(resolve_batch_sizes(32, 4, 2, 4), 32, 4, 2); }

TEST(BatchConfig, AllThreeInconsistentShowsArithmetic) {
  EXPECT_EQ(error_of(30, 4, 2, 4),
            "train_batch_size 30 != train_micro_batch_size_per_gpu 4 * "
            "gradient_accumulation_steps 2 * world size 4 = 32");
}

TEST(BatchConfig, TrainAndMicroSolveAccumulation) {
  expect_sizes(resolve_batch_sizes(64, 4, kUnset, 2), 64, 4, 8);
}

TEST(BatchConfig, TrainAndMicroNotDivisible) {
  std::string e = error_of(30, 4, kUnset, 4);
  EXPECT_THAT(e, HasSubstr("gradient_accumulation_steps: cannot be solved"));
  EXPECT_THAT(e, HasSubstr("train_batch_size 30 is not a positive multiple of "
                           "train_micro_batch_size_per_gpu 4 * world size 4 = 16"));
}

TEST(BatchConfig, TrainAndAccumulationSolveMicro) {
  expect_sizes(resolve_batch_sizes(64, kUnset, 4, 2), 64, 8, 4);
}

TEST(BatchConfig, TrainAndAccumulationNotDivisible) {
  EXPECT_THAT(error_of(10, kUnset, 4, 2),
              HasSubstr("train_micro_batch_size_per_gpu: cannot be solved: train_batch_size 10 is "
                        "not a positive multiple of gradient_accumulation_steps 4 * world size 2 = "
                        "8"));
}

TEST(BatchConfig, MicroAndAccumulationSolveTrain) {
  expect_sizes(resolve_batch_sizes(kUnset, 3, 5, 7), 105, 3, 5);
}

TEST(BatchConfig, OnlyTrainMeansNoAccumulation) {
  expect_sizes(resolve_batch_sizes(48, kUnset, kUnset, 4), 48, 12, 1);
}

TEST(BatchConfig, OnlyTrainNotDivisibleByWorld) {
  EXPECT_THAT(error_of(6, kUnset, kUnset, 4),
              HasSubstr("train_batch_size 6 is not a positive multiple of world size 4 = 4"));
}

TEST(BatchConfig, TrainSmallerThanWorldIsAnError) {
  EXPECT_THAT(error_of(2, kUnset, kUnset, 4), HasSubstr("not a positive multiple"));
}

TEST(BatchConfig, OnlyMicroMeansNoAccumulation) {
  expect_sizes(resolve_batch_sizes(kUnset, 6, kUnset, 3), 18, 6, 1);
}

TEST(BatchConfig, OnlyAccumulationIsAnError) {
  EXPECT_THAT(error_of(kUnset, kUnset, 4, 1),
              HasSubstr("either train_batch_size or train_micro_batch_size_per_gpu must be given"));
}

TEST(BatchConfig, NothingGivenIsAnError) {
  EXPECT_THAT(error_of(kUnset, kUnset, kUnset, 1), HasSubstr("must be given"));
}

TEST(BatchConfig, NonPositiveValuesAreErrors) {
  EXPECT_THAT(error_of(0, kUnset, kUnset, 1),
              HasSubstr("train_batch_size: expected an integer >= 1, got 0"));
  EXPECT_THAT(error_of(kUnset, -2, kUnset, 1),
              HasSubstr("train_micro_batch_size_per_gpu: expected an integer >= 1, got -2"));
  EXPECT_THAT(error_of(8, kUnset, 0, 1),
              HasSubstr("gradient_accumulation_steps: expected an integer >= 1, got 0"));
  EXPECT_THAT(error_of(8, kUnset, kUnset, 0), HasSubstr("world size: expected an integer >= 1"));
}

TEST(BatchConfig, ConfigResolveBatchFillsAllThree) {
  Config c = Config::from_string(R"({"train_batch_size": 24, "gradient_accumulation_steps": 3})");
  EXPECT_FALSE(c.batch_resolved());
  Config r = c.resolved(2);
  EXPECT_FALSE(c.train_micro_batch_size_per_gpu.has_value());  // resolved() leaves c alone
  EXPECT_TRUE(r.batch_resolved());
  EXPECT_EQ(r.dp_world_size, 2);
  EXPECT_EQ(*r.train_micro_batch_size_per_gpu, 4);
  c.resolve_batch(4);
  EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 2);
}

TEST(BatchConfig, AutoBatchKeysAreSolved) {
  Config c = Config::from_string(
      R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
          "gradient_accumulation_steps": "auto"})");
  c.resolve_batch(8);
  EXPECT_EQ(*c.train_batch_size, 16);
  EXPECT_EQ(*c.gradient_accumulation_steps, 1);
  EXPECT_TRUE(c.auto_keys().empty());
}

TEST(BatchConfig, FloatIntegralBatchAccepted) {
  Config c = Config::from_string(R"({"train_batch_size": 1.6e1})");
  EXPECT_EQ(*c.train_batch_size, 16);
}

}  // namespace
}  // namespace deepspeed::config
