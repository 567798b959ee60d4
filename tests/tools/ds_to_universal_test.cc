// ds_to_universal's command line, black box: both folders are required (a usage error naming the missing flag),
// and a folder holding no checkpoint fails in one line naming it. The conversion itself is tested in
// tests/checkpoint (fp32_consolidation_test.cc's Universal tests, and crossover_test.py --universal against Python
// DeepSpeed).
#include <gtest/gtest.h>

#include <string>

#include "temp_dir.h"
#include "tool_process.h"

namespace {

TEST(DsToUniversalCli, BothFoldersAreRequired) {
  const ds_test::ToolResult r = ds_test::run_tool({DS_TO_UNIVERSAL_BIN, "--input_folder", "ckpt/global_step1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--output_folder"), std::string::npos) << r.err;
}

TEST(DsToUniversalCli, AFolderWithoutACheckpointIsNamedInOneLine) {
  ds_test::TempDir tmp;
  const std::string input = tmp.path() + "/global_step7";
  const ds_test::ToolResult r =
      ds_test::run_tool({DS_TO_UNIVERSAL_BIN, "--input_folder", input, "--output_folder", tmp.path() + "/out"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("ds_to_universal: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(input), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
