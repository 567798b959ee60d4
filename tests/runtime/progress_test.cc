// The progress bar's text and when it is drawn (src/runtime/progress.h).
#include "runtime/progress.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

namespace rt = deepspeed::runtime;

TEST(Progress, EtaReadsAsHoursMinutesSeconds) {
  EXPECT_EQ(rt::format_eta(0), "0s");
  EXPECT_EQ(rt::format_eta(42.4), "42s");
  EXPECT_EQ(rt::format_eta(185), "3m05s");
  EXPECT_EQ(rt::format_eta(3600 + 2 * 60 + 59), "1h02m");
  EXPECT_EQ(rt::format_eta(-5), "0s");
}

TEST(Progress, BarShowsStepTotalRatesLossAndEta) {
  // 40 of 200 steps: 20% of a 10-wide bar is 2 marks.
  EXPECT_EQ(rt::format_progress_bar(40, 200, 12.5, 3200, 2.31, 65, 10),
            "[##........]  40/200  20% | 12.5 samples/s | 3200 tokens/s | step loss 2.3100 (rank 0) "
            "| ETA 1m05s");
  // No tokens per sample, ETA unknown yet (first step), the last step fills the bar.
  EXPECT_EQ(rt::format_progress_bar(1, 3, 0, -1, 5.0, -1, 6),
            "[##....] 1/3  33% | 0.0 samples/s | step loss 5.0000 (rank 0) | ETA ?");
  EXPECT_EQ(rt::format_progress_bar(3, 3, 8, -1, 1.5, 0, 6),
            "[######] 3/3 100% | 8.0 samples/s | step loss 1.5000 (rank 0) | ETA 0s");
}

TEST(Progress, DrawnOnATerminalOrWhenForcedAndNeverWhenTurnedOff) {
  ::unsetenv("DS_PROGRESS");
  ::unsetenv("DS_PROGRESS_TTY");
  EXPECT_TRUE(rt::progress_bar_wanted(true));
  EXPECT_FALSE(rt::progress_bar_wanted(false));
  ::setenv("DS_PROGRESS_TTY", "1", 1);  // the launcher forwards rank output to a terminal
  EXPECT_TRUE(rt::progress_bar_wanted(false));
  ::setenv("DS_PROGRESS", "lines", 1);
  EXPECT_FALSE(rt::progress_bar_wanted(true));
  ::setenv("DS_PROGRESS", "bar", 1);
  ::unsetenv("DS_PROGRESS_TTY");
  EXPECT_TRUE(rt::progress_bar_wanted(false));
  ::unsetenv("DS_PROGRESS");
}

// Frames end in "\x1b[K\r" (the cursor rests at the bar's start), are redrawn at once after a log
// line erased the bar (else at most every 0.2 s: not asserted, timing-dependent), and the last step
// ends the line once.
TEST(Progress, FramesAreThrottledRedrawnAfterALogLineAndEndedOnce) {
  rt::ProgressBar bar(/*total=*/3, /*tokens_per_sample=*/0, /*samples_per_step=*/8);
  auto drawn = [](const std::function<void()>& fn) {
    testing::internal::CaptureStdout();
    fn();
    return testing::internal::GetCapturedStdout();
  };
  const std::string first = drawn([&] { bar.on_step(1, 5.0); });
  EXPECT_EQ(first.rfind("[########................] 1/3  33% |", 0), 0u) << first;
  EXPECT_EQ(first.substr(first.size() - 4), "\x1b[K\r") << first;
  EXPECT_EQ(drawn([&] { bar.clear_line(); }), "\x1b[K");
  EXPECT_EQ(drawn([&] { bar.clear_line(); }), "") << "erased once";
  const std::string again = drawn([&] { bar.on_step(2, 4.0); });
  EXPECT_NE(again.find("2/3  67%"), std::string::npos)
      << "a log line erased the bar: redrawn at once";
  const std::string last = drawn([&] { bar.on_step(3, 3.0); });
  EXPECT_NE(last.find("3/3 100%"), std::string::npos) << last;
  EXPECT_EQ(last.substr(last.size() - 4), "\x1b[K\n") << "the last frame ends the line";
  EXPECT_EQ(drawn([&] { bar.on_step(4, 2.0); }), "") << "nothing after the end";
  EXPECT_EQ(drawn([&] { bar.clear_line(); }), "") << "nothing to erase after the end";
}
