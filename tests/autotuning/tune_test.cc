// The search loop: the trial budget, early stopping, failures that do not end the search, skipping
// larger micro batches after an out-of-memory, and best_trial.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <stdexcept>

#include "autotuning_test_util.h"

namespace deepspeed::autotuning {
namespace {

using testing::config_error_of;
using testing::error_of;
using testing::names;
using testing::small_inputs;

// Stages 0-3 x micro batches 1, 2, 4, 8: 16 candidates, gridsearch order.
SearchSpace space_16() { return build_search_space(small_inputs()); }

config::AutotuningConfig gridsearch(int num_trials, int early_stopping) {
  config::AutotuningConfig at;
  at.tuner_type = "gridsearch";
  at.tuner_num_trials = num_trials;
  at.tuner_early_stopping = early_stopping;
  return at;
}

// A run_trial returning the metrics in `metrics` in call order (then 0), counting its calls.
struct Scripted {
  std::vector<double> metrics;
  int calls = 0;
  RunTrial fn() {
    return [this](const Candidate& c) {
      const double m = calls < static_cast<int>(metrics.size()) ? metrics[calls] : 0;
      ++calls;
      return TrialResult{c, TrialStatus::kOk, m, ""};
    };
  }
};

TEST(Tune, NumTrialsCapsTheCalls) {
  Scripted run{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};
  const auto history = tune(space_16(), gridsearch(5, 100), run.fn());
  EXPECT_EQ(run.calls, 5);
  EXPECT_EQ(history.size(), 5u);
}

TEST(Tune, StopsWhenTheSpaceIsExhausted) {
  Scripted run{{}};
  for (int i = 1; i <= 16; ++i) run.metrics.push_back(i);
  EXPECT_EQ(tune(space_16(), gridsearch(100, 100), run.fn()).size(), 16u);
  EXPECT_EQ(run.calls, 16);
}

TEST(Tune, EarlyStoppingAfterNTrialsWithoutImprovement) {
  Scripted run{{100, 90, 80, 70, 60, 50}};  // the first is the best
  tune(space_16(), gridsearch(100, 3), run.fn());
  EXPECT_EQ(run.calls, 1 + 3);
}

TEST(Tune, AnImprovementRestartsTheEarlyStoppingCount) {
  Scripted run{{10, 5, 20, 5, 5, 5, 30}};  // 20 improves on 10; equal metrics do not improve
  const auto history = tune(space_16(), gridsearch(100, 3), run.fn());
  EXPECT_EQ(run.calls, 6);
  EXPECT_EQ(best_trial(history, "throughput")->metric, 20);
}

TEST(Tune, EarlyStoppingCountsTiesAsNoImprovement) {
  Scripted run{{7, 7, 7, 7}};
  tune(space_16(), gridsearch(100, 2), run.fn());
  EXPECT_EQ(run.calls, 3);
}

TEST(Tune, EarlyStoppingFollowsTheMetricDirection) {
  config::AutotuningConfig at = gridsearch(100, 2);
  at.metric = "latency";
  Scripted run{{5, 4, 3, 2, 1, 9, 9, 9}};  // lower is better: improves four times
  tune(space_16(), at, run.fn());
  EXPECT_EQ(run.calls, 7);
}

// Before anything succeeds there is no best to improve on: failures alone never stop the search.
TEST(Tune, FailuresBeforeTheFirstSuccessDoNotTriggerEarlyStopping) {
  int calls = 0;
  const auto history = tune(space_16(), gridsearch(100, 2), [&](const Candidate& c) {
    ++calls;
    if (c.zero_stage < 2) return TrialResult{c, TrialStatus::kFailed, 0, "exit code 1"};
    return TrialResult{c, TrialStatus::kOk, 1, ""};
  });
  EXPECT_EQ(calls, 8 + 1 + 2);  // stages 0 and 1 fail, then one success and two ties
  EXPECT_EQ(best_trial(history, "throughput")->candidate.name(), "z2_mbs1_gas1");
}

TEST(Tune, FailedOutOfMemoryTimeoutAndThrowingTrialsAreRecordedAndTheSearchGoesOn) {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 1;  // one candidate per stage
  const SearchSpace space = build_search_space(in);
  const auto history = tune(space, gridsearch(100, 100), [](const Candidate& c) -> TrialResult {
    switch (c.zero_stage) {
      case 0:
        return {c, TrialStatus::kFailed, 0, "exit code 1"};
      case 1:
        return {c, TrialStatus::kOutOfMemory, 0, "CUDA out of memory"};
      case 2:
        throw std::runtime_error("could not start the trial");
      default:
        return {c, TrialStatus::kOk, 42, ""};
    }
  });
  ASSERT_EQ(history.size(), 4u);
  EXPECT_EQ(history[0].status, TrialStatus::kFailed);
  EXPECT_EQ(history[1].status, TrialStatus::kOutOfMemory);
  EXPECT_EQ(history[2].status, TrialStatus::kFailed);
  EXPECT_EQ(history[2].detail, "could not start the trial");
  EXPECT_EQ(history[2].candidate.name(), "z2_mbs1_gas1");
  EXPECT_EQ(history[3].status, TrialStatus::kOk);
  EXPECT_EQ(best_trial(history, "throughput")->candidate.name(), "z3_mbs1_gas1");
}

TEST(Tune, TimeoutDoesNotStopTheSearch) {
  int calls = 0;
  const auto history = tune(space_16(), gridsearch(4, 100), [&](const Candidate& c) {
    ++calls;
    return TrialResult{c, calls == 1 ? TrialStatus::kTimeout : TrialStatus::kOk, 1.0 * calls, ""};
  });
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(best_trial(history, "throughput")->metric, 4);
}

TEST(Tune, NonFiniteMetricIsAFailure) {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 1;
  const auto history = tune(build_search_space(in), gridsearch(1, 100), [](const Candidate& c) {
    return TrialResult{c, TrialStatus::kOk, std::numeric_limits<double>::quiet_NaN(), ""};
  });
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].status, TrialStatus::kFailed);
  EXPECT_FALSE(best_trial(history, "throughput").has_value());
}

TEST(Tune, TheResultDescribesTheCandidateAsked) {
  const auto history = tune(space_16(), gridsearch(2, 100), [](const Candidate& c) {
    Candidate other;
    other.micro_batch = 999;
    return TrialResult{other, TrialStatus::kOk, 1, ""};
  });
  EXPECT_EQ(names(history), (std::vector<std::string>{"z0_mbs1_gas1", "z0_mbs2_gas1"}));
}

// z1 with micro batch 2 runs out of memory: z1 with 4 and 8 would need more, so they are recorded
// as pruned without running and without using the trial budget; stage 2 is not affected.
TEST(Tune, OutOfMemorySkipsLargerMicroBatchesOfTheSameStageAndOffload) {
  std::vector<std::string> ran;
  const auto history = tune(space_16(), gridsearch(8, 100), [&](const Candidate& c) {
    ran.push_back(c.name());
    if (c.zero_stage == 1 && c.micro_batch >= 2) {
      return TrialResult{c, TrialStatus::kOutOfMemory, 0, "out of memory"};
    }
    return TrialResult{c, TrialStatus::kOk, 1.0 * ran.size(), ""};
  });
  EXPECT_EQ(ran, (std::vector<std::string>{"z0_mbs1_gas1", "z0_mbs2_gas1", "z0_mbs4_gas1",
                                           "z0_mbs8_gas1", "z1_mbs1_gas1", "z1_mbs2_gas1",
                                           "z2_mbs1_gas1", "z2_mbs2_gas1"}));
  ASSERT_EQ(history.size(), 10u);
  EXPECT_EQ(history[6].candidate.name(), "z1_mbs4_gas1");
  EXPECT_EQ(history[6].status, TrialStatus::kPruned);
  EXPECT_EQ(history[6].detail, "micro batch 2 of z1_mbs2_gas1 ran out of memory");
  EXPECT_EQ(history[7].candidate.name(), "z1_mbs8_gas1");
  EXPECT_EQ(history[7].status, TrialStatus::kPruned);
}

TEST(Tune, EveryTunerTypeRunsFromTheConfig) {
  for (const std::string type : {"gridsearch", "random", "model_based"}) {
    config::AutotuningConfig at = gridsearch(100, 100);
    at.tuner_type = type;
    int calls = 0;
    const auto history = tune(space_16(), at, [&](const Candidate& c) {
      ++calls;
      return TrialResult{c, TrialStatus::kOk, 1.0 * c.micro_batch + c.zero_stage, ""};
    });
    EXPECT_EQ(calls, 16) << type;
    EXPECT_EQ(best_trial(history, at.metric)->candidate.name(), "z3_mbs8_gas1") << type;
  }
}

TEST(Tune, BadSettingsNameTheKey) {
  const auto ok = [](const Candidate& c) { return TrialResult{c, TrialStatus::kOk, 1, ""}; };
  EXPECT_EQ(config_error_of([&] { tune(space_16(), gridsearch(0, 5), ok); }),
            "autotuning.tuner_num_trials: must be >= 1, got 0");
  EXPECT_EQ(config_error_of([&] { tune(space_16(), gridsearch(5, 0), ok); }),
            "autotuning.tuner_early_stopping: must be >= 1, got 0");
  config::AutotuningConfig at = gridsearch(5, 5);
  at.tuner_type = "grid";
  EXPECT_EQ(config_error_of([&] { tune(space_16(), at, ok); }).rfind("autotuning.tuner_type: ", 0),
            0u);
}

// A caller's tuner that breaks the contract is reported, not looped on.
TEST(Tune, ATunerRepeatingACandidateIsAnError) {
  struct Stuck : Tuner {
    std::optional<size_t> next(const std::vector<Candidate>&,
                               const std::vector<TrialResult>&) override {
      return 0;
    }
  } stuck;
  const std::string e = error_of([&] {
    tune(space_16(), gridsearch(5, 5), stuck, [](const Candidate& c) {
      return TrialResult{c, TrialStatus::kOk, 1, ""};
    });
  });
  EXPECT_EQ(e, "autotuning::tune: the tuner picked z0_mbs1_gas1 again");
}

TEST(BestTrial, OnlySuccessfulTrialsTheEarliestAmongEquals) {
  Candidate a, b, c;
  a.micro_batch = 1;
  b.micro_batch = 2;
  c.micro_batch = 4;
  const std::vector<TrialResult> results = {{a, TrialStatus::kFailed, 99, ""},
                                            {b, TrialStatus::kOk, 5, ""},
                                            {c, TrialStatus::kOk, 5, ""},
                                            {a, TrialStatus::kPruned, 100, ""}};
  EXPECT_EQ(best_trial(results, "throughput")->candidate.micro_batch, 2);
  EXPECT_EQ(best_trial(results, "latency")->candidate.micro_batch, 2);
  const std::vector<TrialResult> lat = {{a, TrialStatus::kOk, 3, ""}, {b, TrialStatus::kOk, 2, ""}};
  EXPECT_EQ(best_trial(lat, "latency")->candidate.micro_batch, 2);
  EXPECT_EQ(best_trial(lat, "flops")->candidate.micro_batch, 1);
  EXPECT_FALSE(best_trial({{a, TrialStatus::kFailed, 1, ""}}, "throughput").has_value());
}

}  // namespace
}  // namespace deepspeed::autotuning
