// The search space: micro-batch enumeration, stage and offload choices, pruning by the model
// states' memory, and the errors for inputs that leave nothing to tune.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "autotuning_test_util.h"

namespace deepspeed::autotuning {
namespace {

using testing::config_error_of;
using testing::names;
using testing::small_inputs;
using zero::OffloadTarget;
using Sizes = std::vector<int64_t>;

TEST(CandidateName, StableAndFilesystemSafe) {
  Candidate c;
  c.zero_stage = 2;
  c.micro_batch = 4;
  EXPECT_EQ(c.name(), "z2_mbs4_gas1");
  c.zero_stage = 3;
  c.gradient_accumulation = 2;
  c.offload_optimizer = OffloadTarget::kCpu;
  c.offload_param = OffloadTarget::kCpu;
  EXPECT_EQ(c.name(), "z3_mbs4_gas2_offopt-cpu_offparam-cpu");
}

TEST(MicroBatches, PowersOfTwoBetweenTheBoundsPlusTheBounds) {
  SearchInputs in = small_inputs();
  in.autotuning.min_train_micro_batch_size_per_gpu = 3;
  in.autotuning.max_train_micro_batch_size_per_gpu = 20;
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{3, 4, 8, 16, 20}));
}

TEST(MicroBatches, KeepsSmallestLargestAndAnEvenSpread) {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 1024;  // 1, 2, ..., 1024: 11 sizes
  in.autotuning.num_tuning_micro_batch_sizes = 3;
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{1, 32, 1024}));
  in.autotuning.num_tuning_micro_batch_sizes = 4;  // indices round(i * 10 / 3): 0, 3, 7, 10
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{1, 8, 128, 1024}));
  in.autotuning.num_tuning_micro_batch_sizes = 1;
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{1024}));
}

TEST(MicroBatches, MaxTrainBatchSizeBoundsThePerRankSize) {
  SearchInputs in = small_inputs();  // world 4
  in.autotuning.max_train_micro_batch_size_per_gpu = 1024;
  in.autotuning.max_train_batch_size = 40;  // at most 10 per rank
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{1, 2, 4, 8, 10}));
}

TEST(MicroBatches, MinTrainBatchSizeRaisesTheSmallest) {
  SearchInputs in = small_inputs();         // world 4, max micro batch 8
  in.autotuning.min_train_batch_size = 10;  // at least ceil(10 / 4) = 3 per rank
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{3, 4, 8}));
}

TEST(MicroBatches, FixedTrainBatchSizeKeepsDivisorsAndSetsAccumulation) {
  SearchInputs in = small_inputs();  // world 4
  in.autotuning.max_train_micro_batch_size_per_gpu = 1024;
  in.autotuning.max_train_batch_size = 8;  // ignored: the user's train_batch_size wins
  in.train_batch_size = 96;                // 24 per rank: 1, 2, 4, 8 and the bound 24; not 16
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{1, 2, 4, 8, 24}));

  in.stages = {2};
  const SearchSpace space = build_search_space(in);
  ASSERT_EQ(space.candidates.size(), 5u);
  for (const Candidate& c : space.candidates) {
    EXPECT_EQ(c.micro_batch * c.gradient_accumulation * in.world_size, 96) << c.name();
  }
  EXPECT_EQ(space.candidates.front().gradient_accumulation, 24);
  EXPECT_EQ(space.candidates.back().gradient_accumulation, 1);
}

TEST(MicroBatches, WithoutFixedTrainBatchSizeAccumulationIsOne) {
  const SearchSpace space = build_search_space(small_inputs());
  for (const Candidate& c : space.candidates) EXPECT_EQ(c.gradient_accumulation, 1) << c.name();
}

TEST(MicroBatches, ErrorsNameTheKeys) {
  SearchInputs in = small_inputs();
  in.autotuning.min_train_micro_batch_size_per_gpu = 16;  // above max 8
  std::string e = config_error_of([&] { tuning_micro_batch_sizes(in); });
  EXPECT_EQ(e.rfind("autotuning.max_train_micro_batch_size_per_gpu: must be >= ", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  in = small_inputs();  // world 4
  in.autotuning.min_train_micro_batch_size_per_gpu = 4;
  in.autotuning.max_train_batch_size = 8;  // 2 per rank
  e = config_error_of([&] { tuning_micro_batch_sizes(in); });
  EXPECT_EQ(e.rfind("autotuning.min_train_micro_batch_size_per_gpu: ", 0), 0u) << e;
  EXPECT_NE(e.find("autotuning.max_train_batch_size 8 / world size 4"), std::string::npos) << e;

  // Issue 52: each trial's train_batch_size (micro x world) must fit in 64 bits.
  in = small_inputs();  // world 4
  in.autotuning.max_train_micro_batch_size_per_gpu = int64_t{1} << 62;
  e = config_error_of([&] { tuning_micro_batch_sizes(in); });
  EXPECT_EQ(e, "autotuning.max_train_micro_batch_size_per_gpu 4611686018427387904 * world size 4 overflows a 64-bit "
               "integer: give batch sizes a machine can run");
  in.autotuning.max_train_micro_batch_size_per_gpu = int64_t{1} << 61;  // * 4 = 2^63: one past the largest
  EXPECT_NE(config_error_of([&] { tuning_micro_batch_sizes(in); }).find("overflows"), std::string::npos);
  in.autotuning.max_train_micro_batch_size_per_gpu = std::numeric_limits<int64_t>::max() / 4;
  EXPECT_EQ(config_error_of([&] { tuning_micro_batch_sizes(in); }), "(no ConfigError)");

  in = small_inputs();
  in.train_batch_size = 10;  // not a multiple of world 4
  e = config_error_of([&] { tuning_micro_batch_sizes(in); });
  EXPECT_EQ(e.rfind("train_batch_size: must be a multiple of", 0), 0u) << e;

  in = small_inputs();
  in.world_size = 1;
  in.train_batch_size = 12;
  in.autotuning.max_train_micro_batch_size_per_gpu = 1024;
  in.autotuning.min_train_micro_batch_size_per_gpu = 5;  // 5, 8, 12 -> only 12 divides
  EXPECT_EQ(tuning_micro_batch_sizes(in), (Sizes{12}));
  in.autotuning.max_train_micro_batch_size_per_gpu = 10;  // 5, 8, 10 -> none divides 12
  e = config_error_of([&] { tuning_micro_batch_sizes(in); });
  EXPECT_EQ(e.rfind("train_batch_size: no micro-batch size in [5, 10]", 0), 0u) << e;

  in = small_inputs();
  in.autotuning.num_tuning_micro_batch_sizes = 0;
  e = config_error_of([&] { tuning_micro_batch_sizes(in); });
  EXPECT_EQ(e.rfind("autotuning.num_tuning_micro_batch_sizes: ", 0), 0u) << e;
}

TEST(SearchSpace, BadInputsNameTheKey) {
  SearchInputs in = small_inputs();
  in.num_params = 0;
  std::string e = config_error_of([&] { build_search_space(in); });
  EXPECT_EQ(e.rfind("autotuning.model_info.num_params: must be >= 1", 0), 0u) << e;

  in = small_inputs();
  in.autotuning.metric = "speed";
  e = config_error_of([&] { build_search_space(in); });
  EXPECT_EQ(e, "autotuning.metric: expected one of latency, throughput, flops, got \"speed\"");

  in = small_inputs();
  in.stages = {1, 4};
  e = config_error_of([&] { build_search_space(in); });
  EXPECT_EQ(e, "zero_optimization.stage: expected 0, 1, 2 or 3, got 4");
}

TEST(SearchSpace, FastOrdersStagesThenMicroBatchAscendingWithoutOffload) {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 2;
  in.stages = {3, 0, 1, 2};  // sorted by build_search_space
  const SearchSpace space = build_search_space(in);
  EXPECT_EQ(
      names(space.candidates),
      (std::vector<std::string>{"z0_mbs1_gas1", "z0_mbs2_gas1", "z1_mbs1_gas1", "z1_mbs2_gas1",
                                "z2_mbs1_gas1", "z2_mbs2_gas1", "z3_mbs1_gas1", "z3_mbs2_gas1"}));
  EXPECT_TRUE(space.pruned.empty());
}

TEST(SearchSpace, NotFastAddsOptimizerOffloadAndZeroThreeParameterOffload) {
  SearchInputs in = small_inputs();
  in.autotuning.fast = false;
  in.autotuning.max_train_micro_batch_size_per_gpu = 1;
  const SearchSpace space = build_search_space(in);
  EXPECT_EQ(names(space.candidates),
            (std::vector<std::string>{"z0_mbs1_gas1", "z1_mbs1_gas1", "z1_mbs1_gas1_offopt-cpu",
                                      "z2_mbs1_gas1", "z2_mbs1_gas1_offopt-cpu", "z3_mbs1_gas1",
                                      "z3_mbs1_gas1_offopt-cpu", "z3_mbs1_gas1_offopt-cpu_offparam-cpu"}));
}

TEST(SearchSpace, TheUsersOwnOffloadIsKeptAtTheStagesThatAllowIt) {
  SearchInputs in = small_inputs();
  in.autotuning.fast = false;
  in.autotuning.max_train_micro_batch_size_per_gpu = 1;
  in.offload = std::make_pair(OffloadTarget::kNvme, OffloadTarget::kNvme);  // stage 3 only
  EXPECT_EQ(names(build_search_space(in).candidates),
            std::vector<std::string>{"z3_mbs1_gas1_offopt-nvme_offparam-nvme"});
  in.offload = std::make_pair(OffloadTarget::kCpu, OffloadTarget::kNone);
  EXPECT_EQ(names(build_search_space(in).candidates),
            (std::vector<std::string>{"z1_mbs1_gas1_offopt-cpu", "z2_mbs1_gas1_offopt-cpu",
                                      "z3_mbs1_gas1_offopt-cpu"}));
  EXPECT_EQ(user_offload(nlohmann::ordered_json::parse(
                R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})")),
            std::make_pair(OffloadTarget::kNvme, OffloadTarget::kNone));
  EXPECT_EQ(user_offload(
                nlohmann::ordered_json::parse(R"({"zero_optimization": {"cpu_offload": true}})")),
            std::make_pair(OffloadTarget::kCpu, OffloadTarget::kNone));
  EXPECT_FALSE(
      user_offload(nlohmann::ordered_json::parse(
                       R"({"zero_optimization": {"offload_optimizer": {"device": "none"}}})"))
          .has_value());
}

TEST(SearchSpace, RestrictedToTheGivenStages) {
  SearchInputs in = small_inputs();
  in.stages = {2};
  for (const Candidate& c : build_search_space(in).candidates) EXPECT_EQ(c.zero_stage, 2);
}

// Ψ = 1e6 fp32 parameters, N = 4 ranks (Ψ divisible by N: no padding), per rank from the table in
// memory_estimator.h with w = 4, m = 0: stage 0 = 4Ψ + 4Ψ + 8Ψ = 16e6 B; stage 1 = 4Ψ + 4Ψ + 8Ψ/N
// = 10e6; stage 2 = 4Ψ + 4Ψ/N + 8Ψ/N = 7e6; stage 3 = (4 + 4 + 8)Ψ/N = 4e6.
TEST(SearchSpace, PrunesStagesWhoseModelStatesDoNotFit) {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 2;
  in.memory_per_rank_bytes = 8000000;  // stages 0 and 1 over, 2 and 3 under
  const SearchSpace space = build_search_space(in);
  EXPECT_EQ(names(space.candidates), (std::vector<std::string>{"z2_mbs1_gas1", "z2_mbs2_gas1",
                                                               "z3_mbs1_gas1", "z3_mbs2_gas1"}));
  EXPECT_EQ(names(space.pruned), (std::vector<std::string>{"z0_mbs1_gas1", "z0_mbs2_gas1",
                                                           "z1_mbs1_gas1", "z1_mbs2_gas1"}));
  for (const TrialResult& r : space.pruned) EXPECT_EQ(r.status, TrialStatus::kPruned);
  EXPECT_NE(space.pruned[0].detail.find("16000000 B"), std::string::npos) << space.pruned[0].detail;
  EXPECT_NE(space.pruned[0].detail.find("8000000 B"), std::string::npos) << space.pruned[0].detail;
  EXPECT_NE(space.pruned[2].detail.find("10000000 B"), std::string::npos) << space.pruned[2].detail;

  in.memory_per_rank_bytes = 7000000;  // exactly stage 2's need: fits
  EXPECT_EQ(build_search_space(in).candidates.size(), 4u);
  in.memory_per_rank_bytes = 6999999;
  EXPECT_EQ(build_search_space(in).candidates.size(), 2u);
  in.memory_per_rank_bytes = 0;  // unknown: nothing pruned
  EXPECT_EQ(build_search_space(in).candidates.size(), 8u);
}

// bf16 (w = 2, m = 4), Ψ = 1e6, N = 4: stage 3 = (2 + 4 + 4 + 8)Ψ/N = 4.5e6; stage 2 = 2Ψ + (4 +
// 4 + 8)Ψ/N = 6e6.
TEST(SearchSpace, PruningUsesThePrecision) {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 1;
  in.precision = zero::Precision::kBf16;
  in.memory_per_rank_bytes = 4500000;
  EXPECT_EQ(names(build_search_space(in).candidates), (std::vector<std::string>{"z3_mbs1_gas1"}));
  in.memory_per_rank_bytes = 6000000;
  EXPECT_EQ(names(build_search_space(in).candidates),
            (std::vector<std::string>{"z2_mbs1_gas1", "z3_mbs1_gas1"}));
}

// Stage 2 fp32 with optimizer offload, Ψ = 1e6, N = 4: the device keeps the parameters (4Ψ = 4e6)
// and no gradients; the host holds master 4Ψ/N + Adam 8Ψ/N + gradient partition 4Ψ/N = 4e6. So
// 4e6 on an accelerator, 8e6 when host and device are the same memory. Without offload: 7e6.
TEST(SearchSpace, OffloadCountsOnlyDeviceBytesOnAnAccelerator) {
  SearchInputs in = small_inputs();
  in.autotuning.fast = false;
  in.autotuning.max_train_micro_batch_size_per_gpu = 1;
  in.stages = {2};
  in.memory_per_rank_bytes = 5000000;
  in.host_is_device = false;
  EXPECT_EQ(names(build_search_space(in).candidates),
            (std::vector<std::string>{"z2_mbs1_gas1_offopt-cpu"}));
  in.host_is_device = true;
  EXPECT_TRUE(build_search_space(in).candidates.empty());
  in.memory_per_rank_bytes = 8000000;
  EXPECT_EQ(names(build_search_space(in).candidates),
            (std::vector<std::string>{"z2_mbs1_gas1", "z2_mbs1_gas1_offopt-cpu"}));
}

TEST(ZeroStagesToTune, TheUsersStageWhenFixed) {
  using Json = nlohmann::ordered_json;
  EXPECT_EQ(zero_stages_to_tune(Json::parse(R"({"zero_optimization": {"stage": 2}})")),
            (std::vector<int>{2}));
  EXPECT_EQ(zero_stages_to_tune(Json::parse(R"({"train_batch_size": 8})")),
            (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(zero_stages_to_tune(Json::parse(R"({"zero_optimization": {"stage": "auto"}})")),
            (std::vector<int>{0, 1, 2, 3}));
  const std::string e = config_error_of(
      [] { zero_stages_to_tune(Json::parse(R"({"zero_optimization": {"stage": 5}})")); });
  EXPECT_EQ(e, "zero_optimization.stage: expected 0, 1, 2 or 3, got 5");
}

}  // namespace
}  // namespace deepspeed::autotuning
