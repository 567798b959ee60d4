// The tuners: gridsearch walks the space in order, random a seeded permutation, model_based finds
// the best of a metric its linear cost model can express in few trials.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "autotuning/cost_model.h"
#include "autotuning_test_util.h"

namespace deepspeed::autotuning {
namespace {

using testing::config_error_of;
using testing::names;
using testing::small_inputs;

// Stages 0-3 x micro batches 1, 2, ..., 64: 28 candidates.
SearchSpace space_28() {
  SearchInputs in = small_inputs();
  in.autotuning.max_train_micro_batch_size_per_gpu = 64;
  return build_search_space(in);
}

// Linear in the cost model's features: best at stage 3, micro batch 64.
double throughput(const Candidate& c) {
  return 50 + 10 * std::log2(static_cast<double>(c.micro_batch)) + 3 * c.zero_stage;
}

// Calls the tuner until it has nothing left, running every pick with `metric`.
std::vector<TrialResult> exhaust(Tuner& tuner, const std::vector<Candidate>& space,
                                 double (*metric)(const Candidate&)) {
  std::vector<TrialResult> history;
  while (std::optional<size_t> i = tuner.next(space, history)) {
    EXPECT_LT(*i, space.size());
    history.push_back({space[*i], TrialStatus::kOk, metric(space[*i]), ""});
  }
  return history;
}

config::AutotuningConfig tuning(const std::string& tuner_type, int num_trials) {
  config::AutotuningConfig at;
  at.tuner_type = tuner_type;
  at.tuner_num_trials = num_trials;
  at.tuner_early_stopping = 1000;
  return at;
}

std::optional<TrialResult> tune_and_pick(const SearchSpace& space, const std::string& tuner_type,
                                         int num_trials, uint64_t seed) {
  const config::AutotuningConfig at = tuning(tuner_type, num_trials);
  const auto history = tune(
      space, at,
      [](const Candidate& c) {
        return TrialResult{c, TrialStatus::kOk, throughput(c), ""};
      },
      seed);
  return best_trial(history, at.metric);
}

TEST(GridSearch, WalksTheSpaceInOrderOnce) {
  const SearchSpace space = space_28();
  auto tuner = make_tuner("gridsearch", "throughput", 0);
  EXPECT_EQ(names(exhaust(*tuner, space.candidates, throughput)), names(space.candidates));
}

TEST(GridSearch, SkipsWhatTheHistoryAlreadyHolds) {
  const SearchSpace space = space_28();
  auto tuner = make_tuner("gridsearch", "throughput", 0);
  std::vector<TrialResult> history = {{space.candidates[0], TrialStatus::kPruned, 0, "skipped"}};
  EXPECT_EQ(tuner->next(space.candidates, history), std::optional<size_t>(1));
}

TEST(RandomTuner, VisitsEveryCandidateOnceInASeededOrder) {
  const SearchSpace space = space_28();
  auto a = make_tuner("random", "throughput", 7);
  auto b = make_tuner("random", "throughput", 7);
  auto c = make_tuner("random", "throughput", 8);
  const auto order_a = names(exhaust(*a, space.candidates, throughput));
  const auto order_b = names(exhaust(*b, space.candidates, throughput));
  const auto order_c = names(exhaust(*c, space.candidates, throughput));
  EXPECT_EQ(order_a.size(), space.candidates.size());
  EXPECT_EQ(std::set<std::string>(order_a.begin(), order_a.end()).size(), order_a.size());
  EXPECT_EQ(order_a, order_b);                  // same seed, same search
  EXPECT_NE(order_a, order_c);                  // another seed, another order
  EXPECT_NE(order_a, names(space.candidates));  // shuffled
}

TEST(Tuners, EachFindsTheBestWhenAllowedToTryEverything) {
  const SearchSpace space = space_28();
  for (const std::string type : {"gridsearch", "random", "model_based"}) {
    const auto best = tune_and_pick(space, type, 1000, 3);
    ASSERT_TRUE(best.has_value()) << type;
    EXPECT_EQ(best->candidate.name(), "z3_mbs64_gas1") << type;
  }
}

// After its random start the model predicts the best untried candidate; on a metric linear in its
// features that is the optimum within two more trials (one if the start varied both features),
// whatever the seed. A random search of the same budget usually misses it, which shows the budget
// is tight enough to tell them apart.
TEST(ModelBasedTuner, FindsTheBestOfALinearMetricInFewTrials) {
  const SearchSpace space = space_28();
  const int budget = kModelBasedInitialTrials + 2;
  int random_misses = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto best = tune_and_pick(space, "model_based", budget, seed);
    ASSERT_TRUE(best.has_value());
    EXPECT_EQ(best->candidate.name(), "z3_mbs64_gas1") << "seed " << seed;
    if (tune_and_pick(space, "random", budget, seed)->candidate.name() != "z3_mbs64_gas1") {
      ++random_misses;
    }
  }
  EXPECT_GE(random_misses, 10);
}

double latency(const Candidate& c) {
  return 100 - 10 * std::log2(static_cast<double>(c.micro_batch)) - 3 * c.zero_stage;
}

TEST(ModelBasedTuner, MinimisesLatency) {
  const SearchSpace space = space_28();
  for (uint64_t seed = 0; seed < 10; ++seed) {
    auto tuner = make_tuner("model_based", "latency", seed);
    std::vector<TrialResult> history;
    for (int i = 0; i < kModelBasedInitialTrials + 2; ++i) {
      const size_t pick = tuner->next(space.candidates, history).value();
      history.push_back(
          {space.candidates[pick], TrialStatus::kOk, latency(space.candidates[pick]), ""});
    }
    EXPECT_EQ(best_trial(history, "latency")->candidate.name(), "z3_mbs64_gas1") << "seed " << seed;
  }
}

// Failed trials carry no metric: whatever their `metric` field holds must not sway the model.
TEST(ModelBasedTuner, FitsOnlySuccessfulTrials) {
  const SearchSpace space = space_28();  // index = 7 * stage + log2(micro batch)
  std::vector<TrialResult> history;
  for (size_t i : {0, 9, 16}) {  // z0_mbs1, z1_mbs4, z2_mbs4: stage and micro batch both vary
    history.push_back({space.candidates[i], TrialStatus::kOk, throughput(space.candidates[i]), ""});
  }
  // Garbage metrics on failures at small micro batches; fitted, they would pull the pick there.
  for (size_t i : {21, 22, 1})
    history.push_back({space.candidates[i], TrialStatus::kFailed, 1e9, ""});
  history.push_back({space.candidates[2], TrialStatus::kOutOfMemory, 1e9, ""});
  auto tuner = make_tuner("model_based", "throughput", 0);
  const size_t pick = tuner->next(space.candidates, history).value();
  EXPECT_EQ(space.candidates[pick].name(), "z3_mbs64_gas1");
}

TEST(CostModel, RecoversALinearFunction) {
  const SearchSpace space = space_28();
  std::vector<Candidate> xs = {space.candidates[0], space.candidates[9], space.candidates[20],
                               space.candidates[27]};
  std::vector<double> ys;
  for (const Candidate& c : xs) ys.push_back(throughput(c));
  CostModel model;
  model.fit(xs, ys);
  // Not rounding but the fit's ridge (1e-6 of XᵀX's mean diagonal, src/autotuning/cost_model.cc) biases the
  // weights of exact linear data; 1e-3 absolute is 20x less than the smallest weight here, so a wrong feature
  // or a missing intercept still fails.
  EXPECT_NEAR(model.weights()[0], 50, 1e-3);
  EXPECT_NEAR(model.weights()[1], 3, 1e-3);
  EXPECT_NEAR(model.weights()[2], 10, 1e-3);
  for (const Candidate& c : space.candidates) EXPECT_NEAR(model.predict(c), throughput(c), 1e-3);
}

TEST(CostModel, AFeatureThatNeverVariedGetsNoWeight) {
  const SearchSpace space = space_28();  // candidates 0..6 are stage 0, micro batch 1..64
  std::vector<Candidate> xs = {space.candidates[0], space.candidates[3], space.candidates[6]};
  std::vector<double> ys;
  for (const Candidate& c : xs) ys.push_back(throughput(c));
  CostModel model;
  model.fit(xs, ys);
  EXPECT_NEAR(model.weights()[1], 0, 1e-3);  // the stage
  EXPECT_NEAR(model.weights()[2], 10, 1e-3);
}

TEST(MakeTuner, UnknownTypeNamesTheKey) {
  const std::string e = config_error_of([] { make_tuner("bayes", "throughput", 0); });
  EXPECT_EQ(
      e, "autotuning.tuner_type: expected one of gridsearch, random, model_based, got \"bayes\"");
  EXPECT_EQ(
      config_error_of([] { make_tuner("random", "speed", 0); }).rfind("autotuning.metric: ", 0),
      0u);
}

TEST(HigherIsBetter, LatencyIsTheOnlyOneToMinimise) {
  EXPECT_TRUE(higher_is_better("throughput"));
  EXPECT_TRUE(higher_is_better("flops"));
  EXPECT_FALSE(higher_is_better("latency"));
}

}  // namespace
}  // namespace deepspeed::autotuning
