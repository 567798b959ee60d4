// ds_check_config's command line, black box: a bound violated on the command line is one readable
// line naming the flag (CLI11's own check printed the 309-digit maximum of a double).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tool_process.h"

namespace {

TEST(DsCheckConfigCli, WorldSizeZeroSaysTheBound) {
  const ds_test::ToolResult r = ds_test::run_tool({DS_CHECK_CONFIG_BIN, DS_VALID_CONFIG, "--world_size", "0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--world_size: must be >= 1, got 0\n"), std::string::npos) << r.err;
  EXPECT_FALSE(std::regex_search(r.err, std::regex("[0-9]{20}"))) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(DsCheckConfigCli, WorldSizeNotANumberSaysSo) {
  const ds_test::ToolResult r = ds_test::run_tool({DS_CHECK_CONFIG_BIN, DS_VALID_CONFIG, "--world_size", "two"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--world_size: expected a number, got 'two'\n"), std::string::npos) << r.err;
}

TEST(DsCheckConfigCli, ValidWorldSizeStillWorks) {
  const ds_test::ToolResult r = ds_test::run_tool({DS_CHECK_CONFIG_BIN, DS_VALID_CONFIG, "--world_size", "8"}, {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"train_batch_size\""), std::string::npos) << r.out;
}

// The README's generated block `name` (between <!-- name:begin ... --> and <!-- name:end -->).
std::string readme_block(const std::string& name) {
  std::ifstream in(DS_README);
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t begin = readme.find("<!-- " + name + ":begin");
  const size_t end = readme.find("<!-- " + name + ":end -->");
  if (begin == std::string::npos || end == std::string::npos) return "(no " + name + " block in " DS_README ")";
  const size_t first_row = readme.find('\n', begin) + 1;
  return readme.substr(first_row, end - first_row);
}

// The README's key and refusal tables are the ones the code generates: a key or rule added, renamed or redescribed
// in its table changes the README with it (the test fails on a stale copy).
TEST(DsCheckConfigCli, ReadmeTablesAreTheGeneratedOnes) {
  const ds_test::ToolResult keys = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--keys_markdown"});
  ASSERT_EQ(keys.exit_code, 0) << keys.err;
  EXPECT_EQ(readme_block("keys"), keys.out)
      << "README.md's key table is stale: regenerate it with ds_check_config --keys_markdown";
  EXPECT_NE(
      keys.out.find("| `zero_optimization.stage3_max_live_parameters` (`zero_optimization.max_live_parameters`) |"),
      std::string::npos);
  const ds_test::ToolResult refusals = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--refusals_markdown"});
  ASSERT_EQ(refusals.exit_code, 0) << refusals.err;
  EXPECT_EQ(readme_block("refusals"), refusals.out)
      << "README.md's refusal table is stale: regenerate it with ds_check_config --refusals_markdown";
  const ds_test::ToolResult features = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--features_markdown"});
  ASSERT_EQ(features.exit_code, 0) << features.err;
  EXPECT_EQ(readme_block("features"), features.out)
      << "README.md's feature table is stale: regenerate it with ds_check_config --features_markdown";
  EXPECT_EQ(features.out.find("(its example is accepted)"), std::string::npos) << features.out;
  const ds_test::ToolResult autos = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--auto_markdown"});
  ASSERT_EQ(autos.exit_code, 0) << autos.err;
  EXPECT_EQ(readme_block("auto"), autos.out)
      << "README.md's \"auto\" table is stale: regenerate it with ds_check_config --auto_markdown";
  EXPECT_NE(autos.out.find("| `zero_optimization.reduce_bucket_size` | hidden_size 4096, stage 3 | `16777216` "),
            std::string::npos)
      << autos.out;
  for (const std::string which : {"combinations", "pipeline", "initialize"}) {
    const ds_test::ToolResult rules = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--rules_markdown", which});
    ASSERT_EQ(rules.exit_code, 0) << rules.err;
    EXPECT_EQ(readme_block(which), rules.out)
        << "README.md's " << which << " table is stale: regenerate it with ds_check_config --rules_markdown " << which;
  }
  EXPECT_EQ(refusals.out.find("(its example is accepted)"), std::string::npos) << refusals.out;
  EXPECT_NE(
      refusals.out.find("| `aio.use_gds` | true | `...: true needs GPUDirect Storage, which deepspeed-cpp does not "
                        "have; ...` |"),
      std::string::npos)
      << refusals.out;
}

TEST(DsCheckConfigCli, ExplainGivesTypeDefaultAliasAndMeaning) {
  const ds_test::ToolResult r =
      ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--explain", "zero_optimization.max_live_parameters"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("zero_optimization.stage3_max_live_parameters\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("also spelt: zero_optimization.max_live_parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("default:   1000000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"auto\":    read; filled at initialize"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pydantic"), std::string::npos) << r.out;
}

TEST(DsCheckConfigCli, ExplainOfAnUnknownKeyPointsAtTheNearestOne) {
  ds_test::ToolResult r = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--explain", "stage3_max_live_parameters"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "ds_check_config: --explain stage3_max_live_parameters: no such config key (did you mean "
            "'zero_optimization.stage3_max_live_parameters'?)\n");
  r = ds_test::run_tool({DS_CHECK_CONFIG_BIN, "--explain", "gradient_clippin"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("(did you mean 'gradient_clipping'?)"), std::string::npos) << r.err;
  r = ds_test::run_tool({DS_CHECK_CONFIG_BIN});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("a config FILE is required"), std::string::npos) << r.err;
}

// What initialize() refuses only while building a part (here the LR schedule's params, checked by the schedule's own
// constructor) ds_check_config refuses too, with the same message.
TEST(DsCheckConfigCli, SchedulerParamsAreCheckedAsInitializeChecksThem) {
  const std::string path = ::testing::TempDir() + "ds_check_config_bad_schedule.json";
  {
    std::ofstream out(path);
    out << R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"lr": 0.001}},
               "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10, "warmup_num_steps": 100}}})";
  }
  const ds_test::ToolResult r = ds_test::run_tool({DS_CHECK_CONFIG_BIN, path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("scheduler.params.total_num_steps (10) must be >= warmup_num_steps (100"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
