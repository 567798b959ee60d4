// The results table: one aligned row per result, the best marked, pruned and failed rows with
// their reason, and a closing line naming the winner.
#include <gtest/gtest.h>

#include <sstream>

#include "autotuning_test_util.h"

namespace deepspeed::autotuning {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

std::vector<TrialResult> results() {
  Candidate z0, z2, z3;
  z0.micro_batch = 2;
  z2.zero_stage = 2;
  z2.micro_batch = 4;
  z3.zero_stage = 3;
  z3.micro_batch = 16;
  z3.gradient_accumulation = 2;
  z3.offload_optimizer = zero::OffloadTarget::kCpu;
  return {{z0, TrialStatus::kPruned, 0, "model states need 16.00 MiB"},
          {z2, TrialStatus::kOk, 120.5, ""},
          {z3, TrialStatus::kOk, 250.25, ""},
          {z2, TrialStatus::kFailed, 0, "exit code 1"},
          {z3, TrialStatus::kOutOfMemory, 0, ""}};
}

TEST(ResultsTable, MarksTheBestAndShowsWhyOthersDidNotRun) {
  const std::vector<std::string> lines = lines_of(results_table(results(), "throughput"));
  ASSERT_EQ(lines.size(), 1u + 5u + 1u);
  EXPECT_NE(lines[0].find("throughput (samples/s)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("pruned: model states need 16.00 MiB"), std::string::npos) << lines[1];
  EXPECT_NE(lines[4].find("failed: exit code 1"), std::string::npos) << lines[4];
  EXPECT_NE(lines[5].find("out_of_memory"), std::string::npos) << lines[5];
  EXPECT_EQ(lines[3].rfind("* | z3_mbs16_gas2_offopt-cpu", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find("optimizer=cpu"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("250.25"), std::string::npos) << lines[3];
  for (size_t i = 1; i <= 5; ++i) {
    if (i == 3) continue;
    EXPECT_EQ(lines[i].rfind("  | ", 0), 0u) << lines[i];  // unmarked
  }
  EXPECT_EQ(lines.back(), "best: z3_mbs16_gas2_offopt-cpu (throughput 250.25)");
}

TEST(ResultsTable, ColumnsAreAligned) {
  const std::vector<std::string> lines = lines_of(results_table(results(), "throughput"));
  // Every row has its separators at the header's positions (the last column is free text).
  std::vector<size_t> header_bars;
  for (size_t p = lines[0].find(" | "); p != std::string::npos; p = lines[0].find(" | ", p + 1)) {
    header_bars.push_back(p);
  }
  ASSERT_EQ(header_bars.size(), 7u);
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    for (size_t p : header_bars) EXPECT_EQ(lines[i].substr(p, 3), " | ") << lines[i];
  }
}

TEST(ResultsTable, LatencyMarksTheLowest) {
  const std::vector<std::string> lines = lines_of(results_table(results(), "latency"));
  EXPECT_NE(lines[0].find("latency (s/step)"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[2].rfind("* | z2_mbs4_gas1", 0), 0u) << lines[2];
  EXPECT_EQ(lines.back(), "best: z2_mbs4_gas1 (latency 120.5)");
}

TEST(ResultsTable, SaysWhenNothingSucceeded) {
  std::vector<TrialResult> failed = results();
  failed.erase(failed.begin() + 1, failed.begin() + 3);
  const std::string table = results_table(failed, "flops");
  EXPECT_EQ(table.find('*'), std::string::npos) << table;
  EXPECT_EQ(lines_of(table).back(), "best: none, no trial succeeded");
}

TEST(TrialStatusName, Names) {
  EXPECT_STREQ(trial_status_name(TrialStatus::kOk), "ok");
  EXPECT_STREQ(trial_status_name(TrialStatus::kFailed), "failed");
  EXPECT_STREQ(trial_status_name(TrialStatus::kOutOfMemory), "out_of_memory");
  EXPECT_STREQ(trial_status_name(TrialStatus::kTimeout), "timeout");
  EXPECT_STREQ(trial_status_name(TrialStatus::kPruned), "pruned");
}

}  // namespace
}  // namespace deepspeed::autotuning
