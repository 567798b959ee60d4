// The fp16 loss scaler against closed-form sequences of DeepSpeed's DynamicLossScaler / static
// scaler.
#include "runtime/loss_scaler.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

LossScalerOptions dynamic_options(int power, int window, int hysteresis) {
  LossScalerOptions o;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  return o;
}

std::string config_error(const LossScalerOptions& o) {
  try {
    LossScaler scaler(o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LossScaler, DefaultsMatchDeepSpeed) {
  LossScaler scaler{LossScalerOptions{}};
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.loss_scale(), 65536.0);
  EXPECT_EQ(scaler.state().cur_hysteresis, 2);
  EXPECT_EQ(scaler.state().last_overflow_iter, -1);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.last_message(), "");
}

TEST(LossScaler, HysteresisDelaysTheFirstShiftThenEveryOverflowHalves) {
  LossScaler scaler(dynamic_options(16, 1000, 2));
  EXPECT_TRUE(scaler.update(true, "w"));
  EXPECT_EQ(scaler.loss_scale(), 65536.0);  // one unit of hysteresis spent, scale kept
  EXPECT_EQ(scaler.state().cur_hysteresis, 1);
  EXPECT_EQ(scaler.last_message(),
            "OVERFLOW! skipping step 0: gradient of 'w' is inf/nan; loss scale 65536 kept "
            "(hysteresis 2 -> 1)");
  EXPECT_TRUE(scaler.update(true, "w"));
  EXPECT_EQ(scaler.loss_scale(), 32768.0);
  // The counter stays at 1 after a shift (DeepSpeed refills it only on growth), so the next
  // overflow halves.
  EXPECT_TRUE(scaler.update(true, "w"));
  EXPECT_EQ(scaler.loss_scale(), 16384.0);
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(LossScaler, WithoutHysteresisEachOverflowHalvesAndLogsTheParameter) {
  LossScaler scaler(dynamic_options(16, 1000, 1));
  EXPECT_TRUE(scaler.update(true, "blocks.0.fc.weight"));
  EXPECT_EQ(scaler.loss_scale(), 32768.0);
  EXPECT_EQ(
      scaler.last_message(),
      "OVERFLOW! skipping step 0: gradient of 'blocks.0.fc.weight' is inf/nan; loss scale 65536 "
      "-> 32768");
  EXPECT_FALSE(scaler.update(false));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.loss_scale(), 16384.0);
  EXPECT_EQ(scaler.last_message(),
            "OVERFLOW! skipping step 2: a gradient is inf/nan; loss scale 32768 -> 16384");
}

TEST(LossScaler, GrowsAfterEachWindowOfCleanSteps) {
  LossScaler scaler(dynamic_options(4, 3, 1));
  // From the start, (cur_iter - (-1)) % 3 == 0 first at cur_iter 2: growth after 3 clean steps,
  // then every 3.
  for (int k = 1; k <= 12; ++k) {
    EXPECT_FALSE(scaler.update(false));
    EXPECT_EQ(scaler.loss_scale(), 16.0 * (1 << (k / 3))) << "after clean step " << k;
  }
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.last_message(), "");
}

TEST(LossScaler, WindowRestartsAtTheLastOverflow) {
  LossScaler scaler(dynamic_options(4, 4, 1));
  scaler.update(false);
  scaler.update(false);
  EXPECT_TRUE(scaler.update(true));  // step 2
  EXPECT_EQ(scaler.loss_scale(), 8.0);
  EXPECT_EQ(scaler.state().last_overflow_iter, 2);
  for (int k = 1; k <= 3; ++k) {
    scaler.update(false);
    EXPECT_EQ(scaler.loss_scale(), 8.0) << "after clean step " << k;
  }
  scaler.update(false);  // step 6: (6 - 2) % 4 == 0
  EXPECT_EQ(scaler.loss_scale(), 16.0);
}

TEST(LossScaler, CleanStepsDoNotRefillHysteresisUnlessTheScaleGrows) {
  LossScaler scaler(dynamic_options(10, 100, 3));
  scaler.update(true);  // 3 -> 2
  scaler.update(false);
  scaler.update(false);
  scaler.update(true);  // 2 -> 1
  scaler.update(false);
  EXPECT_EQ(scaler.loss_scale(), 1024.0);
  scaler.update(true);  // counter at 1: shift
  EXPECT_EQ(scaler.loss_scale(), 512.0);

  // Growth refills it: window 2, overflow at step 0 spends hysteresis, growth at step 2 refills it.
  LossScaler grows(dynamic_options(10, 2, 2));
  grows.update(true);
  EXPECT_EQ(grows.state().cur_hysteresis, 1);
  grows.update(false);
  EXPECT_EQ(grows.state().cur_hysteresis, 1);
  grows.update(false);
  EXPECT_EQ(grows.loss_scale(), 2048.0);
  EXPECT_EQ(grows.state().cur_hysteresis, 2);
  grows.update(true);
  EXPECT_EQ(grows.loss_scale(), 2048.0);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScalerOptions o = dynamic_options(10, 100, 3);
  o.consecutive_hysteresis = true;
  LossScaler scaler(o);
  for (int round = 0; round < 5; ++round) {
    scaler.update(true);
    scaler.update(true);  // two in a row: 3 -> 2 -> 1, still no shift
    scaler.update(false);
    EXPECT_EQ(scaler.state().cur_hysteresis, 3);
  }
  EXPECT_EQ(scaler.loss_scale(), 1024.0);
  EXPECT_EQ(scaler.skipped_steps(), 10);
  scaler.update(true);
  scaler.update(true);
  scaler.update(true);  // the third consecutive overflow shifts
  EXPECT_EQ(scaler.loss_scale(), 512.0);
}

TEST(LossScaler, NeverGoesBelowMinLossScale) {
  LossScalerOptions o = dynamic_options(3, 1000, 1);
  o.min_loss_scale = 3;
  o.raise_error_at_min_scale = false;
  LossScaler scaler(o);
  scaler.update(true);
  EXPECT_EQ(scaler.loss_scale(), 4.0);
  scaler.update(true);
  EXPECT_EQ(scaler.loss_scale(), 3.0);  // max(2, 3)
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.loss_scale(), 3.0);
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

TEST(LossScaler, OverflowAtMinScaleThrowsNamingTheParameterAndKeepsState) {
  LossScalerOptions o = dynamic_options(1, 1000, 1);
  o.min_loss_scale = 1;
  LossScaler scaler(o);
  EXPECT_TRUE(scaler.update(true, "embed.weight"));
  EXPECT_EQ(scaler.loss_scale(), 1.0);
  const LossScaler::State before = scaler.state();
  try {
    scaler.update(true, "blocks.0.fc.weight");
    FAIL() << "expected an error at min_loss_scale";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fp16 loss scale is already at min_loss_scale 1: gradient of "
                        "'blocks.0.fc.weight' overflowed again"),
              std::string::npos)
        << what;
  }
  const LossScaler::State after = scaler.state();
  EXPECT_EQ(after.cur_iter, before.cur_iter);
  EXPECT_EQ(after.skipped_steps, before.skipped_steps);
  EXPECT_EQ(after.cur_scale, before.cur_scale);
}

TEST(LossScaler, HysteresisIsSpentBeforeTheMinScaleError) {
  LossScalerOptions o = dynamic_options(0, 1000, 2);  // starts at the minimum, 1
  LossScaler scaler(o);
  EXPECT_TRUE(scaler.update(true, "w"));  // DeepSpeed only checks the minimum when it would shift
  EXPECT_THROW(scaler.update(true, "w"), Error);
}

TEST(LossScaler, SkippedStepsCountOverflowsOnly) {
  LossScaler scaler(dynamic_options(20, 5, 2));
  const std::vector<bool> flags = {false, true,  true, false, false,
                                   true,  false, true, false, false};
  int64_t overflows = 0;
  for (bool f : flags) {
    EXPECT_EQ(scaler.update(f), f);
    overflows += f;
  }
  EXPECT_EQ(overflows, 4);
  EXPECT_EQ(scaler.skipped_steps(), 4);
  EXPECT_EQ(scaler.cur_iter(), 10);
}

TEST(LossScaler, StaticScaleNeverChangesButOverflowStillSkips) {
  LossScalerOptions o;
  o.loss_scale = 128;
  LossScaler scaler(o);
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.loss_scale(), 128.0);
  for (int i = 0; i < 2500; ++i) EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.loss_scale(), 128.0);
  EXPECT_TRUE(scaler.update(true, "head.bias"));
  EXPECT_TRUE(scaler.update(true, "head.bias"));
  EXPECT_TRUE(scaler.update(true, "head.bias"));  // no minimum to hit: never throws
  EXPECT_EQ(scaler.loss_scale(), 128.0);
  EXPECT_EQ(scaler.skipped_steps(), 3);
  EXPECT_EQ(scaler.last_message(),
            "OVERFLOW! skipping step 2502: gradient of 'head.bias' is inf/nan; loss scale 128 "
            "(static, unchanged)");
}

TEST(LossScaler, StateRoundTripContinuesTheSameSchedule) {
  LossScalerOptions o = dynamic_options(8, 3, 2);
  LossScaler a(o);
  const std::vector<bool> flags = {true,  false, true,  true,  false, false, false,
                                   false, true,  false, false, false, false, true,
                                   true,  false, false, false, false, false};
  for (size_t i = 0; i < 9; ++i) a.update(flags[i]);
  // Closed form after T F T T F F F F T from 256, window 3, hysteresis 2: shifts at steps 2 and 3,
  // growth at step 6 (refilling hysteresis), hysteresis spent at step 8.
  const LossScaler::State mid = a.state();
  EXPECT_EQ(mid.cur_scale, 128.0);
  EXPECT_EQ(mid.cur_iter, 9);
  EXPECT_EQ(mid.last_overflow_iter, 8);
  EXPECT_EQ(mid.cur_hysteresis, 1);
  EXPECT_EQ(mid.skipped_steps, 4);
  LossScaler b(o);
  b.load_state(a.state());
  EXPECT_EQ(b.loss_scale(), a.loss_scale());
  EXPECT_EQ(b.skipped_steps(), a.skipped_steps());
  for (size_t i = 9; i < flags.size(); ++i) {
    EXPECT_EQ(a.update(flags[i]), b.update(flags[i]));
    EXPECT_EQ(a.loss_scale(), b.loss_scale()) << "step " << i;
    EXPECT_EQ(a.state().cur_hysteresis, b.state().cur_hysteresis) << "step " << i;
    EXPECT_EQ(a.state().last_overflow_iter, b.state().last_overflow_iter) << "step " << i;
  }
  EXPECT_EQ(b.cur_iter(), static_cast<int64_t>(flags.size()));
}

TEST(LossScaler, LoadStateRejectsImpossibleValues) {
  LossScaler scaler(dynamic_options(8, 3, 2));
  LossScaler::State s = scaler.state();
  s.cur_scale = 0;
  EXPECT_THROW(scaler.load_state(s), Error);
  s = scaler.state();
  s.cur_hysteresis = 3;
  EXPECT_THROW(scaler.load_state(s), Error);
  s = scaler.state();
  s.cur_iter = 4;
  s.last_overflow_iter = 4;
  EXPECT_THROW(scaler.load_state(s), Error);
  s = scaler.state();
  s.cur_iter = 2;
  s.skipped_steps = 3;
  EXPECT_THROW(scaler.load_state(s), Error);
  EXPECT_EQ(scaler.loss_scale(), 256.0);  // failed loads change nothing
}

TEST(LossScaler, InvalidOptionsNameTheConfigKey) {
  struct Case {
    LossScalerOptions options;
    std::string key;
  };
  std::vector<Case> cases;
  LossScalerOptions o;
  o.loss_scale_window = 0;
  cases.push_back({o, "fp16.loss_scale_window"});
  o = {};
  o.hysteresis = 0;
  cases.push_back({o, "fp16.hysteresis"});
  o = {};
  o.min_loss_scale = 0;
  cases.push_back({o, "fp16.min_loss_scale"});
  o = {};
  o.min_loss_scale = -1;
  cases.push_back({o, "fp16.min_loss_scale"});
  o = {};
  o.loss_scale = -1;
  cases.push_back({o, "fp16.loss_scale"});
  o = {};
  o.loss_scale = std::numeric_limits<double>::infinity();
  cases.push_back({o, "fp16.loss_scale"});
  o = {};
  o.initial_scale_power = -1;
  cases.push_back({o, "fp16.initial_scale_power"});
  o = {};
  o.initial_scale_power = 65;
  cases.push_back({o, "fp16.initial_scale_power"});
  o = {};
  o.initial_scale_power = 2;
  o.min_loss_scale = 8;
  cases.push_back(
      {o, "fp16.initial_scale_power 2 starts the dynamic scale at 4, below fp16.min_loss_scale 8"});
  for (const Case& c : cases) {
    const std::string what = config_error(c.options);
    EXPECT_NE(what.find(c.key), std::string::npos)
        << "expected '" << c.key << "' in '" << what << "'";
  }
  EXPECT_EQ(config_error(LossScalerOptions{}), "");
}

}  // namespace
}  // namespace deepspeed::runtime
