// ds_to_fp32's command line, black box: --help is a request (usage on stdout, exit 0); a wrong
// argument count is an error (usage on stderr, exit 2). Merging itself is tested in
// tests/checkpoint/fp32_consolidation_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tool_process.h"

namespace {

TEST(DsToFp32Cli, HelpPrintsUsageOnStdoutAndExitsZero) {
  for (const char* flag : {"--help", "-h"}) {
    const ds_test::ToolResult r = ds_test::run_tool({DS_TO_FP32_BIN, flag});
    EXPECT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    EXPECT_EQ(r.out.rfind("usage: ds_to_fp32 <checkpoint_dir> [tag] <output.safetensors|output.pt>\n", 0), 0u)
        << flag << ": " << r.out;
    EXPECT_EQ(r.err, "") << flag;
  }
}

TEST(DsToFp32Cli, WrongArgumentCountPrintsUsageOnStderrAndExitsTwo) {
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{DS_TO_FP32_BIN}, std::vector<std::string>{DS_TO_FP32_BIN, "ckpt"},
        std::vector<std::string>{DS_TO_FP32_BIN, "a", "b", "c", "d"}}) {
    const ds_test::ToolResult r = ds_test::run_tool(argv);
    EXPECT_EQ(r.exit_code, 2) << argv.size() << " arguments";
    EXPECT_EQ(r.err.rfind("usage: ds_to_fp32 ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
