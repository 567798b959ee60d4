// The log line both engines print (runtime/step_log.h) and the window it covers.
#include "runtime/step_log.h"

#include <gtest/gtest.h>

#include <limits>

namespace rt = deepspeed::runtime;

TEST(StepLog, Fp32LineWithProgressTokensAndEta) {
  rt::StepLine l;
  l.step = 20;
  l.total_steps = 100;
  l.loss = 2.31;
  l.lrs = {1e-3, 5e-4};
  l.grad_norm = 0.81234;
  l.samples_per_sec = 12.5;
  l.tokens_per_sample = 256;
  l.seconds_per_step = 0.8;  // 80 steps left: 64 s
  EXPECT_EQ(rt::format_step_line(l),
            "step 20/100 (20%) | loss 2.3100 | lr [0.001,0.0005] | grad_norm 0.8123 | 12.5 samples/s | "
            "3200 tokens/s | ETA 1m04s");
  l.trained_tokens_per_sec = 1234.4;  // counted by the training loop (an SFT batch's response tokens): these win
  EXPECT_NE(rt::format_step_line(l).find("12.5 samples/s | 1234 tokens/s"), std::string::npos)
      << rt::format_step_line(l);
  l.tokens_per_sample = 0;  // no tokens per sample given: the counted tokens still show
  EXPECT_NE(rt::format_step_line(l).find("| 1234 tokens/s"), std::string::npos) << rt::format_step_line(l);
}

TEST(StepLog, Fp16FieldsAndAnEngineOwnFieldWithoutKnownTotal) {
  rt::StepLine l;
  l.step = 7;
  l.loss = 5.0;
  l.lrs = {0.01};
  l.grad_norm = 1.5;
  l.loss_scale = 1024.0;
  l.skipped_steps = 3;
  l.samples_per_sec = 8.0;
  l.seconds_per_step = 2.0;  // no total: no ETA
  l.extra = "stage 0 idle 12%";
  EXPECT_EQ(rt::format_step_line(l),
            "step 7 | loss 5.0000 | lr [0.01] | grad_norm 1.5000 | loss_scale 1024 | skipped 3 | 8.0 samples/s | "
            "stage 0 idle 12%");
}

TEST(StepLog, ANormNotComputedIsLeftOutAndAnOverflowShown) {
  rt::StepLine l;
  l.step = 3;
  l.loss = 2.0;
  l.lrs = {0.01};
  l.grad_norm = -1.0;  // zero_optimization.compute_grad_norm false
  l.samples_per_sec = 4.0;
  EXPECT_EQ(rt::format_step_line(l), "step 3 | loss 2.0000 | lr [0.01] | 4.0 samples/s");
  l.grad_norm = std::numeric_limits<double>::infinity();  // a step skipped for an overflow
  EXPECT_EQ(rt::format_step_line(l), "step 3 | loss 2.0000 | lr [0.01] | grad_norm inf | 4.0 samples/s");
}

TEST(StepLog, WindowCountsStepsSinceTheLastLineOrRestart) {
  rt::LogWindow w;
  EXPECT_EQ(w.close(10).steps, 10);
  EXPECT_EQ(w.close(15).steps, 5);
  w.restart(100);  // a checkpoint loaded at step 100
  EXPECT_EQ(w.close(104).steps, 4);
}
