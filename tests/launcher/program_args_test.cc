// deepspeed/arguments.h: strip_launcher_args, add_config_arguments for CLI11, and the one-line
// report of an uncaught exception, the last two end to end through the real launcher on a program
// that reads its config path from argv[1] (tests/launcher/config_program.cc, built as
// launcher_config_program).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "deepspeed/arguments.h"
#include "launcher_process.h"

namespace deepspeed {
namespace {

using launcher::testing::lines_starting_with;
using launcher::testing::run_launcher;
using launcher::testing::RunResult;
using launcher::testing::TempDir;

// Runs strip_launcher_args on a real argc/argv built from `args`; returns what is left.
std::vector<std::string> strip(std::vector<std::string> args, int* rank) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  *rank = strip_launcher_args(argc, argv.data());
  EXPECT_EQ(argv[static_cast<size_t>(argc)], nullptr) << "argv[argc] must stay nullptr";
  return std::vector<std::string>(argv.begin(), argv.begin() + argc);
}

using Args = std::vector<std::string>;

TEST(StripLauncherArgs, RemovesBothSpellingsAndReturnsTheRank) {
  int rank = 0;
  EXPECT_EQ(strip({"prog", "--local_rank=3", "ds.json"}, &rank), (Args{"prog", "ds.json"}));
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(strip({"prog", "--steps", "5", "--local_rank", "1", "x"}, &rank),
            (Args{"prog", "--steps", "5", "x"}));
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(strip({"prog", "ds.json"}, &rank), (Args{"prog", "ds.json"}));
  EXPECT_EQ(rank, -1);
  EXPECT_EQ(strip({"prog"}, &rank), (Args{"prog"}));
  EXPECT_EQ(rank, -1);
}

TEST(StripLauncherArgs, LeavesWhatIsNotTheLaunchersFlag) {
  int rank = 0;
  // Not a rank number, a longer flag name, a missing value, or after "--": the program's own.
  for (const Args& args :
       {Args{"prog", "--local_rank=x"}, Args{"prog", "--local_rank=-1"},
        Args{"prog", "--local_rank_x=1"}, Args{"prog", "--local_rank"},
        Args{"prog", "--local_rank", "ds.json"}, Args{"prog", "--", "--local_rank=2"}}) {
    EXPECT_EQ(strip(args, &rank), args);
    EXPECT_EQ(rank, -1);
  }
}

TEST(StripLauncherArgs, VectorFormMatches) {
  Args args{"--local_rank=2", "ds.json", "--local_rank", "2", "--", "--local_rank=5"};
  EXPECT_EQ(strip_launcher_args(args), 2);
  EXPECT_EQ(args, (Args{"ds.json", "--", "--local_rank=5"}));
}

TEST(AddConfigArguments, ParsesDeepSpeedsFlagsAndTheLaunchersLocalRank) {
  CLI::App app{"t"};
  ConfigArguments ds;
  add_config_arguments(app, ds);
  ASSERT_NO_THROW(app.parse("--deepspeed_config ds.json --deepspeed --local_rank=2"));
  EXPECT_TRUE(ds.deepspeed);
  EXPECT_EQ(ds.deepspeed_config, "ds.json");
  EXPECT_EQ(ds.local_rank, 2);
  const std::string help = app.help();
  for (const char* word : {"DeepSpeed", "--deepspeed", "--deepspeed_config", "--local_rank"}) {
    EXPECT_NE(help.find(word), std::string::npos) << word << " missing from:\n" << help;
  }
}

TEST(AddConfigArguments, DefaultsAndDeprecatedSpellings) {
  CLI::App app{"t"};
  ConfigArguments ds;
  add_config_arguments(app, ds);
  app.parse("");
  EXPECT_FALSE(ds.deepspeed);
  EXPECT_EQ(ds.deepspeed_config, "");
  EXPECT_EQ(ds.local_rank, -1);
  app.parse("--deepscale_config old.json --deepscale");
  EXPECT_TRUE(ds.deepspeed);
  EXPECT_EQ(ds.deepspeed_config, "old.json");
}

TEST(AddConfigArguments, TheReturnedGroupCanRequireTheConfig) {
  CLI::App app{"t"};
  ConfigArguments ds;
  add_config_arguments(app, ds)->get_option("--deepspeed_config")->required();
  EXPECT_THROW(app.parse("--deepspeed"), CLI::RequiredError);
}

TEST(ArgumentChecks, SayTheBoundInOneReadableLine) {
  EXPECT_EQ(check_at_least(1)("1"), "");
  EXPECT_EQ(check_at_least(1)("0"), "must be >= 1, got 0");
  EXPECT_EQ(check_at_least(0)("-3"), "must be >= 0, got -3");
  EXPECT_EQ(check_at_least(1)("abc"), "expected a number, got 'abc'");
  EXPECT_EQ(check_at_least(1)(""), "expected a number, got ''");
  EXPECT_EQ(check_in_range(256, 1 << 20)("1048576"), "");
  EXPECT_EQ(check_in_range(256, 1 << 20)("3"), "must be in [256, 1048576], got 3");
  EXPECT_EQ(check_in_range(0, 0.99)("2"), "must be in [0, 0.99], got 2");
  EXPECT_EQ(check_in_range(0, 0.99)("0.5"), "");
}

TEST(ArgumentChecks, Cli11ReportsThemWithTheOptionName) {
  CLI::App app{"t"};
  long steps = 0;
  app.add_option("--steps", steps)->check(check_at_least(1));
  try {
    app.parse("--steps 0");
    FAIL() << "--steps 0 was accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_EQ(std::string(e.what()), "--steps: must be >= 1, got 0");
  }
  app.parse("--steps 7");
  EXPECT_EQ(steps, 7);
}

std::string write_config(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The failure the issue reported: argv[1] read as the config got "--local_rank=0".
TEST(ConfigProgram, ReadsArgv1AfterStrippingTheLaunchersFlag) {
  TempDir dir;
  const std::string cfg =
      write_config(dir, "ds.json",
                   R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}})");
  const RunResult r = run_launcher({"--num_procs", "2", DS_CONFIG_PROGRAM, cfg});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_starting_with(r.out, "[rank0]: config ok: zero stage 2, local_rank 0").size(), 1u)
      << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "[rank1]: config ok: zero stage 2, local_rank 1").size(), 1u)
      << r.out;
}

TEST(ConfigProgram, Cli11ProgramTakesTheLaunchersFlag) {
  TempDir dir;
  const std::string cfg = write_config(dir, "ds.json", R"({"train_batch_size": 4})");
  const RunResult r = run_launcher(
      {"--num_procs", "2", DS_CONFIG_PROGRAM, "--cli11", "--deepspeed", "--deepspeed_config", cfg});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_starting_with(r.out, "[rank1]: config ok: zero stage 0, local_rank 1").size(), 1u)
      << r.out;
}

// A library error nobody caught: its one line and status 1, not "terminate called" and SIGABRT.
TEST(ConfigProgram, UncaughtLibraryErrorPrintsOneLineAndExitsOne) {
  TempDir dir;
  const std::string cfg = write_config(
      dir, "bad.json", R"({"train_batch_size": 4, "zero_optimization": {"stage": 5}})");
  const RunResult r = run_launcher({"--num_procs", "2", DS_CONFIG_PROGRAM, cfg});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("SIGABRT"), std::string::npos) << r.err;
  const auto lines = lines_starting_with(r.err, "[rank");
  bool found = false;
  for (const std::string& line : lines) {
    if (line.find("]: launcher_config_program: error: ") != std::string::npos &&
        line.find("zero_optimization.stage") != std::string::npos) {
      found = true;
    }
  }
  EXPECT_TRUE(found) << r.err;
}

}  // namespace
}  // namespace deepspeed
