// ds_check_config's command line, black box: a bound violated on the command line is one readable
// line naming the flag (CLI11's own check printed the 309-digit maximum of a double).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tool_process.h"

namespace {

TEST(DsCheckConfigCli, WorldSizeZeroSaysTheBound) {
  const ds_test::ToolResult r =
      ds_test::run_tool({DS_CHECK_CONFIG_BIN, DS_VALID_CONFIG, "--world_size", "0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--world_size: must be >= 1, got 0\n"), std::string::npos) << r.err;
  EXPECT_FALSE(std::regex_search(r.err, std::regex("[0-9]{20}"))) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(DsCheckConfigCli, WorldSizeNotANumberSaysSo) {
  const ds_test::ToolResult r =
      ds_test::run_tool({DS_CHECK_CONFIG_BIN, DS_VALID_CONFIG, "--world_size", "two"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--world_size: expected a number, got 'two'\n"), std::string::npos) << r.err;
}

TEST(DsCheckConfigCli, ValidWorldSizeStillWorks) {
  const ds_test::ToolResult r =
      ds_test::run_tool({DS_CHECK_CONFIG_BIN, DS_VALID_CONFIG, "--world_size", "8"}, {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"train_batch_size\""), std::string::npos) << r.out;
}

}  // namespace
