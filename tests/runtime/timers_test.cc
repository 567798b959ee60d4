// The wall_clock_breakdown timers and their table (src/runtime/timers.h).
#include "runtime/timers.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace rt = deepspeed::runtime;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST(Timers, AddAccumulatesUntilReset) {
  rt::Timers t;
  t.add("bwd_reduce", 1.5);
  t.add("bwd_reduce", 2.0);
  EXPECT_DOUBLE_EQ(t.elapsed_ms("bwd_reduce"), 3.5);
  EXPECT_DOUBLE_EQ(t.elapsed_ms("unknown"), 0.0);
  t.start("fwd");
  t.stop("fwd");
  EXPECT_GE(t.elapsed_ms("fwd"), 0.0);
  t.reset();
  EXPECT_DOUBLE_EQ(t.elapsed_ms("bwd_reduce"), 0.0);
}

TEST(Timers, TableHasOneAlignedRowPerTimerWithPerStepAndShare) {
  const std::vector<rt::TimerRow> rows = {{"forward", 40.0, 0},
                                          {"backward", 50.0, 0},
                                          {"compute", 30.0, 1},
                                          {"reduce (blocked)", 20.0, 1},
                                          {"step", 10.0, 0}};
  const std::string table =
      rt::format_timer_table(rows, /*last_step=*/20, /*steps=*/10, /*iteration_ms=*/100.0);
  const auto lines = lines_of(table);
  ASSERT_EQ(lines.size(), 6u) << table;
  EXPECT_EQ(lines[0].rfind("time (ms), steps 11-20", 0), 0u) << lines[0];
  // Every row ends at the same column, so the numbers line up.
  for (const auto& line : lines) EXPECT_EQ(line.size(), lines[0].size()) << table;
  // forward: total 40, per step 4, 40% of the iteration.
  EXPECT_NE(lines[1].find("  forward "), std::string::npos);
  EXPECT_NE(lines[1].find("40.00"), std::string::npos);
  EXPECT_NE(lines[1].find(" 4.00"), std::string::npos);
  EXPECT_NE(lines[1].find("40.0%"), std::string::npos);
  // Parts are indented under their row.
  EXPECT_EQ(lines[3].rfind("    compute ", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4].rfind("    reduce (blocked) ", 0), 0u) << lines[4];
  EXPECT_NE(lines[4].find("20.0%"), std::string::npos);
  EXPECT_NE(lines[5].find("10.0%"), std::string::npos);
}

TEST(Timers, TableOfOneStepNamesThatStep) {
  const std::string table = rt::format_timer_table({{"forward", 5.0, 0}}, 7, 1, 5.0);
  EXPECT_EQ(table.rfind("time (ms), step 7 ", 0), 0u) << table;
  EXPECT_NE(table.find("100.0%"), std::string::npos) << table;
}
