// LR schedules against closed-form values written from DeepSpeed's documented formulas (or derived
// by hand), at several steps of every branch; state round-trips; rejected params.
#include "deepspeed/lr_schedules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "tolerance.h"

namespace deepspeed::runtime {
namespace {

const double kPi = std::acos(-1.0);
const std::vector<double> kTwoGroups = {0.1, 0.02};

// The schedules' closed forms in double on both sides, grouped differently (logs, cosines, powers): a few dozen
// double roundings at most, relative to the value (absolute below 1).
void expect_close(double actual, double expected) {
  EXPECT_NEAR(actual, expected,
              tolerance::reordered(tolerance::kFp64Epsilon, 64, 1) * std::max(1.0, std::fabs(expected)));
}

// Steps `s` until last_batch_iteration == t (t >= s.last_batch_iteration()).
void step_to(LrScheduler& s, int64_t t) {
  while (s.last_batch_iteration() < t) s.step();
  ASSERT_EQ(s.last_batch_iteration(), t);
}

// Every group's lr after step t equals `expected`.
void expect_lr_at(LrScheduler& s, int64_t t, double expected) {
  step_to(s, t);
  ASSERT_EQ(s.get_lr().size(), s.num_groups());
  for (size_t g = 0; g < s.num_groups(); ++g) {
    SCOPED_TRACE("group " + std::to_string(g) + " step " + std::to_string(t));
    expect_close(s.get_lr()[g], expected);
    expect_close(s.get_last_lr()[g], expected);
  }
}

void expect_mom_at(LrScheduler& s, int64_t t, double expected) {
  step_to(s, t);
  ASSERT_TRUE(s.get_momentum().has_value());
  for (double m : *s.get_momentum()) expect_close(m, expected);
}

// Throws ConfigError whose message names `key` as `scheduler.params.<key>`.
void expect_rejects(const std::function<void()>& make, const std::string& key) {
  try {
    make();
    ADD_FAILURE() << "expected a ConfigError naming " << key;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("scheduler.params." + key), std::string::npos) << e.what();
  }
}

// ---- WarmupLR ----

TEST(WarmupLR, LogWarmupThenHold) {
  WarmupLRParams p;
  p.warmup_min_lr = 0.01;
  p.warmup_max_lr = 0.1;
  p.warmup_num_steps = 10;
  auto s = make_warmup_lr(p, kTwoGroups);
  EXPECT_STREQ(s->type(), "WarmupLR");
  EXPECT_EQ(s->last_batch_iteration(), -1);
  // Before the first step: warmup_min_lr, which DeepSpeed >= 0.15.3 writes into the optimizer at construction.
  for (double lr : s->get_lr()) EXPECT_EQ(lr, 0.01);
  EXPECT_FALSE(s->get_momentum().has_value());
  const double delta = 0.09;
  expect_lr_at(*s, 0, 0.01);  // log(1) = 0
  expect_lr_at(*s, 4, 0.01 + delta * std::log(5.0) / std::log(10.0));
  expect_lr_at(*s, 8, 0.01 + delta * std::log(9.0) / std::log(10.0));
  expect_lr_at(*s, 9, 0.1);
  expect_lr_at(*s, 10, 0.1);
  expect_lr_at(*s, 1000, 0.1);
}

TEST(WarmupLR, LinearWarmup) {
  WarmupLRParams p;
  p.warmup_min_lr = 0.0;
  p.warmup_max_lr = 0.2;
  p.warmup_num_steps = 8;
  p.warmup_type = "linear";
  auto s = make_warmup_lr(p, {1.0});
  expect_lr_at(*s, 0, 0.0);
  expect_lr_at(*s, 2, 0.05);
  expect_lr_at(*s, 4, 0.1);
  expect_lr_at(*s, 7, 0.175);
  expect_lr_at(*s, 8, 0.2);
  expect_lr_at(*s, 50, 0.2);
}

TEST(WarmupLR, WarmupStepsBelowTwoCountAsTwo) {
  for (int64_t w : {0, 1, 2}) {
    WarmupLRParams p;
    p.warmup_min_lr = 0.1;
    p.warmup_max_lr = 0.5;
    p.warmup_num_steps = w;
    auto log = make_warmup_lr(p, {1.0});
    expect_lr_at(*log, 0, 0.1);
    expect_lr_at(*log, 1, 0.5);
    p.warmup_type = "linear";
    auto lin = make_warmup_lr(p, {1.0});
    expect_lr_at(*lin, 0, 0.1);
    expect_lr_at(*lin, 1, 0.3);  // 1/2 of the way
    expect_lr_at(*lin, 2, 0.5);
  }
}

// ---- WarmupDecayLR ----

TEST(WarmupDecayLR, LinearWarmupThenLinearDecayToFloor) {
  WarmupDecayLRParams p;
  p.total_num_steps = 30;
  p.warmup_min_lr = 0.0;
  p.warmup_max_lr = 0.1;
  p.warmup_num_steps = 10;
  p.warmup_type = "linear";
  auto s = make_warmup_decay_lr(p, kTwoGroups);
  EXPECT_STREQ(s->type(), "WarmupDecayLR");
  for (double lr : s->get_lr()) EXPECT_EQ(lr, 0.0);
  expect_lr_at(*s, 0, 0.0);
  expect_lr_at(*s, 5, 0.05);
  expect_lr_at(*s, 10, 0.1);    // (30 - 10) / 20
  expect_lr_at(*s, 15, 0.075);  // (30 - 15) / 20
  expect_lr_at(*s, 29, 0.005);
  expect_lr_at(*s, 30, 0.0);
  expect_lr_at(*s, 45, 0.0);  // clamped, not negative
}

TEST(WarmupDecayLR, LogWarmupAndDecayTowardsMinLr) {
  WarmupDecayLRParams p;
  p.total_num_steps = 20;
  p.warmup_min_lr = 0.02;
  p.warmup_max_lr = 0.12;
  p.warmup_num_steps = 5;
  auto s = make_warmup_decay_lr(p, {1.0});
  expect_lr_at(*s, 2, 0.02 + 0.1 * std::log(3.0) / std::log(5.0));
  expect_lr_at(*s, 5, 0.12);
  expect_lr_at(*s, 8, 0.02 + 0.1 * 12.0 / 15.0);
  expect_lr_at(*s, 20, 0.02);  // gamma reaches 0: the lr floor is warmup_min_lr
  expect_lr_at(*s, 100, 0.02);
}

TEST(WarmupDecayLR, TotalEqualToWarmupDecaysImmediately) {
  WarmupDecayLRParams p;
  p.total_num_steps = 4;
  p.warmup_max_lr = 1.0;
  p.warmup_num_steps = 4;
  p.warmup_type = "linear";
  auto s = make_warmup_decay_lr(p, {1.0});
  expect_lr_at(*s, 3, 0.75);
  expect_lr_at(*s, 4, 0.0);  // (4 - 4) / max(1, 0)
}

// ---- WarmupCosineLR ----

TEST(WarmupCosineLR, LinearWarmupCosineDecayAndHold) {
  WarmupCosineLRParams p;
  p.total_num_steps = 110;
  p.warmup_num_steps = 10;
  p.warmup_min_ratio = 0.2;
  p.cos_min_ratio = 0.05;
  p.warmup_type = "linear";
  auto s = make_warmup_cosine_lr(p, kTwoGroups);
  EXPECT_STREQ(s->type(), "WarmupCosineLR");
  auto expect_ratio = [&](int64_t t, double ratio) {
    step_to(*s, t);
    SCOPED_TRACE("step " + std::to_string(t));
    expect_close(s->get_lr()[0], 0.1 * ratio);
    expect_close(s->get_lr()[1], 0.02 * ratio);
  };
  expect_ratio(-1, 0.0);
  expect_ratio(0, 0.2);
  expect_ratio(5, 0.6);
  expect_ratio(9, 0.92);
  // Cosine over the 100 steps after warmup; step t is (t - 10 + 1) steps in.
  expect_ratio(10, 0.05 + 0.95 * (1.0 + std::cos(kPi * 0.01)) / 2.0);
  expect_ratio(59, 0.525);  // half way: cos(pi / 2) = 0
  expect_ratio(84, 0.05 + 0.95 * (1.0 + std::cos(kPi * 0.75)) / 2.0);
  expect_ratio(109, 0.05);  // end value = cos_min_ratio * base lr
  expect_ratio(110, 0.05);
  expect_ratio(500, 0.05);
}

TEST(WarmupCosineLR, LogWarmupFromZeroRatio) {
  WarmupCosineLRParams p;
  p.total_num_steps = 20;
  p.warmup_num_steps = 4;
  auto s = make_warmup_cosine_lr(p, {0.5});
  expect_lr_at(*s, 0, 0.0);
  expect_lr_at(*s, 2, 0.5 * std::log(3.0) / std::log(4.0));
  expect_lr_at(*s, 3, 0.5);
  expect_lr_at(*s, 11, 0.5 * (0.0001 + 0.9999 * 0.5));  // 8 of 16 cosine steps
  expect_lr_at(*s, 19, 0.5 * 0.0001);
}

// ---- OneCycle ----

OneCycleParams one_cycle_params() {
  OneCycleParams p;
  p.cycle_min_lr = 0.01;
  p.cycle_max_lr = 0.11;
  p.cycle_first_step_size = 10;
  p.cycle_second_step_size = 20;
  p.cycle_min_mom = 0.85;
  p.cycle_max_mom = 0.95;
  return p;
}

TEST(OneCycle, BothHalvesOfTheCycleWithMomentum) {
  auto s = make_one_cycle(one_cycle_params(), kTwoGroups);
  EXPECT_STREQ(s->type(), "OneCycle");
  // Construction: DeepSpeed writes cycle_min_lr and cycle_min_mom into the optimizer.
  expect_lr_at(*s, -1, 0.01);
  expect_mom_at(*s, -1, 0.85);
  // Rising half: step t is (t + 1) / 10 of the way up; momentum falls as lr rises.
  expect_lr_at(*s, 0, 0.02);
  expect_mom_at(*s, 0, 0.94);
  expect_lr_at(*s, 4, 0.06);
  expect_mom_at(*s, 4, 0.90);
  expect_lr_at(*s, 9, 0.11);  // the peak
  expect_mom_at(*s, 9, 0.85);
  // Falling half over 20 steps: (t + 1 - 10) steps down.
  expect_lr_at(*s, 14, 0.01 + 0.1 * 15.0 / 20.0);
  expect_mom_at(*s, 14, 0.95 - 0.1 * 15.0 / 20.0);
  expect_lr_at(*s, 28, 0.015);
  expect_lr_at(*s, 29, 0.01);  // end of the cycle
  expect_mom_at(*s, 29, 0.95);
  // No decay configured: hold the cycle's ends.
  expect_lr_at(*s, 30, 0.01);
  expect_mom_at(*s, 30, 0.95);
  expect_lr_at(*s, 400, 0.01);
  expect_mom_at(*s, 400, 0.95);
}

TEST(OneCycle, SecondStepSizeDefaultsToFirst) {
  OneCycleParams p = one_cycle_params();
  p.cycle_second_step_size.reset();
  auto s = make_one_cycle(p, {1.0});
  expect_lr_at(*s, 9, 0.11);
  expect_lr_at(*s, 14, 0.06);  // 5 of 10 steps down
  expect_lr_at(*s, 19, 0.01);
}

TEST(OneCycle, PostCycleDecayOfLrAndMomentum) {
  OneCycleParams p = one_cycle_params();
  p.decay_step_size = 5;
  p.decay_lr_rate = 0.5;
  p.decay_mom_rate = 0.1;
  auto s = make_one_cycle(p, {1.0});
  expect_lr_at(*s, 29, 0.01);
  // n steps after the cycle: lr = min / (1 + rate * n / 5), momentum = max * (1 + rate * n / 5).
  expect_lr_at(*s, 30, 0.01 / 1.1);
  expect_mom_at(*s, 30, 0.95 * 1.02);
  expect_lr_at(*s, 39, 0.005);
  expect_mom_at(*s, 39, 0.95 * 1.2);
}

TEST(OneCycle, DecayStepSizeWithoutRateHoldsLr) {
  OneCycleParams p = one_cycle_params();
  p.decay_step_size = 5;
  p.decay_mom_rate = 0.1;  // momentum decays, lr (rate 0) does not
  auto s = make_one_cycle(p, {1.0});
  expect_lr_at(*s, 39, 0.01);
  expect_mom_at(*s, 39, 0.95 * 1.2);
}

TEST(OneCycle, StaircaseInBothHalves) {
  OneCycleParams p;
  p.cycle_min_lr = 0.0;
  p.cycle_max_lr = 1.2;
  p.cycle_first_step_size = 12;
  p.cycle_first_stair_count = 3;  // levels 0, 0.4, 0.8, then 1.2 at the peak
  p.cycle_second_step_size = 8;
  p.cycle_second_stair_count = 4;  // two steps per stair: 1.2, 0.9, 0.6, 0.3, then 0
  p.cycle_min_mom = 0.8;
  p.cycle_max_mom = 0.9;
  auto s = make_one_cycle(p, {1.0});
  // Rising: position (t + 1) in 0..12, stair floor(pos / 4).
  const double up[] = {0.0, 0.0, 0.0, 0.4, 0.4, 0.4, 0.4, 0.8, 0.8, 0.8, 0.8, 1.2};
  for (int t = 0; t < 12; ++t) {
    expect_lr_at(*s, t, up[t]);
    expect_mom_at(*s, t, 0.9 - 0.1 * up[t] / 1.2);  // momentum takes the same stairs, inverted
  }
  // Falling: d = t + 1 - 12 steps down, stair floor(d / 2).
  const double down[] = {1.2, 0.9, 0.9, 0.6, 0.6, 0.3, 0.3, 0.0};
  for (int d = 1; d <= 8; ++d) {
    expect_lr_at(*s, 11 + d, down[d - 1]);
    expect_mom_at(*s, 11 + d, 0.9 - 0.1 * down[d - 1] / 1.2);
  }
}

TEST(OneCycle, SecondStairCountDefaultsToFirst) {
  OneCycleParams p;
  p.cycle_min_lr = 0.0;
  p.cycle_max_lr = 1.0;
  p.cycle_first_step_size = 4;
  p.cycle_first_stair_count = 2;
  auto s = make_one_cycle(p, {1.0});
  expect_lr_at(*s, 0, 0.0);
  expect_lr_at(*s, 1, 0.5);
  expect_lr_at(*s, 3, 1.0);
  expect_lr_at(*s, 4, 1.0);  // first falling step: stair 0
  expect_lr_at(*s, 5, 0.5);
  expect_lr_at(*s, 7, 0.0);
}

TEST(OneCycle, NoMomentumWhenCycleMomentumOff) {
  OneCycleParams p = one_cycle_params();
  p.cycle_momentum = false;
  p.cycle_min_mom = 2.0;  // not checked when momentum is off
  auto s = make_one_cycle(p, {1.0});
  EXPECT_FALSE(s->get_momentum().has_value());
  s->step();
  EXPECT_FALSE(s->get_momentum().has_value());
}

// ---- LRRangeTest ----

TEST(LRRangeTest, ContinuousIncrease) {
  LRRangeTestParams p;
  p.lr_range_test_min_lr = 0.001;
  p.lr_range_test_step_size = 10;
  p.lr_range_test_step_rate = 2.0;
  auto s = make_lr_range_test(p, kTwoGroups);
  EXPECT_STREQ(s->type(), "LRRangeTest");
  expect_lr_at(*s, -1, 0.001);  // DeepSpeed writes the min lr at construction
  expect_lr_at(*s, 0, 0.001 * (1.0 + 2.0 * 0.1));
  expect_lr_at(*s, 14, 0.004);
  expect_lr_at(*s, 99, 0.021);
}

TEST(LRRangeTest, Staircase) {
  LRRangeTestParams p;
  p.lr_range_test_min_lr = 0.001;
  p.lr_range_test_step_size = 10;
  p.lr_range_test_step_rate = 2.0;
  p.lr_range_test_staircase = true;
  auto s = make_lr_range_test(p, {1.0});
  expect_lr_at(*s, 0, 0.001);
  expect_lr_at(*s, 8, 0.001);
  expect_lr_at(*s, 9, 0.003);  // 10 steps done: first stair
  expect_lr_at(*s, 18, 0.003);
  expect_lr_at(*s, 24, 0.005);
}

// ---- state ----

// Each factory with params that make the lr move at every step around step 7.
std::vector<std::function<std::unique_ptr<LrScheduler>()>> all_schedulers() {
  return {
      [] {
        WarmupLRParams p;
        p.warmup_num_steps = 20;
        return make_warmup_lr(p, kTwoGroups);
      },
      [] {
        WarmupDecayLRParams p;
        p.total_num_steps = 12;
        p.warmup_num_steps = 4;
        p.warmup_type = "linear";
        return make_warmup_decay_lr(p, kTwoGroups);
      },
      [] {
        WarmupCosineLRParams p;
        p.total_num_steps = 30;
        p.warmup_num_steps = 5;
        return make_warmup_cosine_lr(p, kTwoGroups);
      },
      [] {
        OneCycleParams p = one_cycle_params();
        p.cycle_first_step_size = 6;
        return make_one_cycle(p, kTwoGroups);
      },
      [] {
        LRRangeTestParams p;
        p.lr_range_test_step_size = 3;
        return make_lr_range_test(p, kTwoGroups);
      },
  };
}

TEST(LrSchedulerState, RoundTripContinuesTheSchedule) {
  for (const auto& make : all_schedulers()) {
    auto original = make();
    SCOPED_TRACE(original->type());
    for (int i = 0; i < 7; ++i) original->step();
    const LrSchedulerState saved = original->state_dict();
    EXPECT_EQ(saved.last_batch_iteration, 6);

    auto restored = make();
    restored->load_state_dict(saved);
    EXPECT_EQ(restored->last_batch_iteration(), 6);
    EXPECT_EQ(restored->get_lr(), original->get_lr());
    EXPECT_EQ(restored->get_momentum(), original->get_momentum());

    const std::vector<double> before = original->get_lr();
    original->step();
    restored->step();
    EXPECT_EQ(restored->get_lr(), original->get_lr());
    EXPECT_EQ(restored->get_momentum(), original->get_momentum());
    EXPECT_NE(original->get_lr(), before);  // the step really moved the lr
  }
}

TEST(LrSchedulerState, StepToIterationEqualsRepeatedSteps) {
  for (const auto& make : all_schedulers()) {
    auto walked = make();
    auto jumped = make();
    SCOPED_TRACE(walked->type());
    for (int i = 0; i < 10; ++i) walked->step();
    jumped->step(9);
    EXPECT_EQ(jumped->last_batch_iteration(), 9);
    EXPECT_EQ(jumped->get_lr(), walked->get_lr());
  }
}

TEST(LrSchedulerState, LastBatchIterationParamResumes) {
  WarmupDecayLRParams p;
  p.total_num_steps = 30;
  p.warmup_max_lr = 0.1;
  p.warmup_num_steps = 10;
  p.warmup_type = "linear";
  p.last_batch_iteration = 14;
  auto s = make_warmup_decay_lr(p, {1.0});
  EXPECT_EQ(s->last_batch_iteration(), 14);
  expect_close(s->get_lr()[0], 0.08);
  s->step();
  expect_close(s->get_lr()[0], 0.075);
}

TEST(LrSchedulerState, RejectsIterationsBeforeTheStart) {
  auto s = make_lr_range_test(LRRangeTestParams{}, {1.0});
  EXPECT_THROW(s->step(-2), Error);
  EXPECT_THROW(s->load_state_dict(LrSchedulerState{-3}), Error);
  EXPECT_EQ(s->last_batch_iteration(), -1);  // unchanged by the failed calls
  LRRangeTestParams p;
  p.last_batch_iteration = -2;
  expect_rejects([&] { make_lr_range_test(p, {1.0}); }, "last_batch_iteration");
}

// ---- bad params ----

TEST(LrSchedulerParams, WarmupRejections) {
  WarmupLRParams w;
  w.warmup_type = "exp";
  expect_rejects([&] { make_warmup_lr(w, {1.0}); }, "warmup_type");
  w = WarmupLRParams{};
  w.warmup_num_steps = -1;
  expect_rejects([&] { make_warmup_lr(w, {1.0}); }, "warmup_num_steps");
  w = WarmupLRParams{};
  w.warmup_max_lr = std::nan("");
  expect_rejects([&] { make_warmup_lr(w, {1.0}); }, "warmup_max_lr");
  w = WarmupLRParams{};
  w.warmup_min_lr = -0.1;
  expect_rejects([&] { make_warmup_lr(w, {1.0}); }, "warmup_min_lr");

  WarmupDecayLRParams d;  // total_num_steps left at 0: it is required
  expect_rejects([&] { make_warmup_decay_lr(d, {1.0}); }, "total_num_steps");
  d.total_num_steps = 999;  // below the default warmup_num_steps of 1000
  expect_rejects([&] { make_warmup_decay_lr(d, {1.0}); }, "total_num_steps");
  d.total_num_steps = 2000;
  d.warmup_type = "Linear";
  expect_rejects([&] { make_warmup_decay_lr(d, {1.0}); }, "warmup_type");

  WarmupCosineLRParams c;
  c.total_num_steps = 1000;  // equal to warmup: no room for the cosine
  expect_rejects([&] { make_warmup_cosine_lr(c, {1.0}); }, "total_num_steps");
  c.total_num_steps = 2000;
  c.cos_min_ratio = -0.5;
  expect_rejects([&] { make_warmup_cosine_lr(c, {1.0}); }, "cos_min_ratio");
  c.cos_min_ratio = 0.1;
  c.warmup_min_ratio = INFINITY;
  expect_rejects([&] { make_warmup_cosine_lr(c, {1.0}); }, "warmup_min_ratio");
}

TEST(LrSchedulerParams, OneCycleRejections) {
  OneCycleParams p = one_cycle_params();
  p.cycle_min_lr.reset();
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "cycle_min_lr");
  p = one_cycle_params();
  p.cycle_max_lr = 0.001;  // below cycle_min_lr
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "cycle_max_lr");
  p = one_cycle_params();
  p.cycle_first_step_size = 0;
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "cycle_first_step_size");
  p = one_cycle_params();
  p.cycle_second_step_size = -5;
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "cycle_second_step_size");
  p = one_cycle_params();
  p.cycle_first_stair_count = -1;
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "cycle_first_stair_count");
  p = one_cycle_params();
  p.decay_step_size = -1;
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "decay_step_size");
  p = one_cycle_params();
  p.decay_lr_rate = -0.5;
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "decay_lr_rate");
  p = one_cycle_params();
  p.cycle_max_mom = 0.5;  // below cycle_min_mom
  expect_rejects([&] { make_one_cycle(p, {1.0}); }, "cycle_max_mom");
}

TEST(LrSchedulerParams, RangeTestRejections) {
  LRRangeTestParams p;
  p.lr_range_test_step_size = 0;
  expect_rejects([&] { make_lr_range_test(p, {1.0}); }, "lr_range_test_step_size");
  p = LRRangeTestParams{};
  p.lr_range_test_step_rate = -1.0;
  expect_rejects([&] { make_lr_range_test(p, {1.0}); }, "lr_range_test_step_rate");
}

TEST(LrSchedulerParams, NeedsAtLeastOneGroup) {
  EXPECT_THROW(make_warmup_lr(WarmupLRParams{}, {}), ConfigError);
  EXPECT_THROW(make_lr_range_test(LRRangeTestParams{}, {}), ConfigError);
  WarmupCosineLRParams c;
  c.total_num_steps = 2000;
  EXPECT_THROW(make_warmup_cosine_lr(c, {}), ConfigError);
  EXPECT_THROW(make_warmup_cosine_lr(c, {0.1, -1.0}), ConfigError);
}

}  // namespace
}  // namespace deepspeed::runtime
