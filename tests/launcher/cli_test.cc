// The `deepspeed` binary's command line end to end: bad input gives one line and exit code 1 or 2;
// hostfile-driven single-node runs (local host, --include, --no_ssh with --node_rank) start the
// right world.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "launcher_process.h"

namespace deepspeed::launcher {
namespace {

using testing::count_lines;
using testing::lines_starting_with;
using testing::run_launcher;
using testing::RunResult;
using testing::TempDir;

const std::string kPort = std::to_string(DS_TEST_PORT);

std::string write_hostfile(const TempDir& dir, const std::string& text) {
  const std::string path = dir.path() + "/hostfile";
  std::ofstream(path) << text;
  return path;
}

// A command-line mistake: exactly one line on stderr, naming the problem, and the given exit code.
void expect_one_line_error(const RunResult& r, int code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("deepspeed: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(DeepSpeedCli, UnknownFlagIsRejected) {
  expect_one_line_error(run_launcher({"--bogus_flag", DS_RANK_PROGRAM}), 2, "'--bogus_flag'");
}

TEST(DeepSpeedCli, MissingProgramIsRejected) {
  expect_one_line_error(run_launcher({"--num_procs", "2"}), 2, "missing the program");
}

TEST(DeepSpeedCli, MalformedNumberIsRejected) {
  expect_one_line_error(run_launcher({"--num_procs", "two", DS_RANK_PROGRAM}), 2, "two");
}

TEST(DeepSpeedCli, PythonOnlyFlagIsRejected) {
  expect_one_line_error(run_launcher({"--module", DS_RANK_PROGRAM}), 2, "Python-only");
}

TEST(DeepSpeedCli, ProgramThatDoesNotExistIsRejected) {
  expect_one_line_error(run_launcher({"--num_procs", "2", "/nonexistent/train"}), 1,
                        "cannot execute program '/nonexistent/train'");
}

TEST(DeepSpeedCli, BadHostfileNamesFileAndLine) {
  TempDir dir;
  const std::string hostfile = write_hostfile(dir, "localhost slots=2\nworker-1 slots:2\n");
  expect_one_line_error(run_launcher({"--hostfile", hostfile, DS_RANK_PROGRAM}), 1,
                        hostfile + ":2: expected 'hostname slots=N', got 'worker-1 slots:2'");
}

TEST(DeepSpeedCli, UnsupportedMultiNodeBackendIsRejected) {
  TempDir dir;
  const std::string hostfile = write_hostfile(dir, "remote-a slots=2\nremote-b slots=2\n");
  expect_one_line_error(run_launcher({"-H", hostfile, "--launcher", "mvapich", DS_RANK_PROGRAM}),
                        1, "--launcher mvapich is not supported by deepspeed-cpp; use pdsh, ssh, "
                           "openmpi or slurm");
}

TEST(DeepSpeedCli, NumGpusWithIncludeIsRejected) {
  expect_one_line_error(
      run_launcher({"--num_gpus", "2", "--include", "localhost:0", DS_RANK_PROGRAM}), 1,
      "cannot be combined");
}

TEST(DeepSpeedCli, HelpListsFlagsAndExitsZero) {
  const RunResult r = run_launcher({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--num_gpus"), std::string::npos);
  EXPECT_NE(r.out.find("--enable_each_rank_log"), std::string::npos);
}

TEST(DeepSpeedCli, LocalHostfileWithIncludeRunsTheIncludedSlots) {
  TempDir dir;
  const std::string hostfile = write_hostfile(dir, "# this box\nlocalhost slots=4\n");
  const RunResult r = run_launcher({"-H", hostfile, "--include", "localhost:1,3", "--master_port",
                                    kPort, DS_RANK_PROGRAM, "--check-env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto env_lines = lines_starting_with(r.out, "[rank");
  ASSERT_EQ(env_lines.size(), 2u) << r.out;
  EXPECT_NE(r.out.find("[rank1]: env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2"),
            std::string::npos)
      << r.out;
}

TEST(DeepSpeedCli, NoSshWithNodeRankRunsThisNodesShare) {
  TempDir dir;
  const std::string hostfile = write_hostfile(dir, "node-a slots=2\nnode-b slots=2\n");
  const RunResult r =
      run_launcher({"-H", hostfile, "--no_ssh", "--node_rank", "1", "--master_addr", "127.0.0.1",
                    "--master_port", kPort, DS_RANK_PROGRAM, "--check-env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.out.find("[rank2]: env RANK=2 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 "
                 "NODE_RANK=1 CROSS_RANK=1 CROSS_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                 kPort),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[rank3]: env RANK=3 WORLD_SIZE=4 LOCAL_RANK=1"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("[rank0]"), std::string::npos) << r.out;
}

TEST(DeepSpeedCli, ExplicitMissingHostfileWarnsAndRunsLocally) {
  const RunResult r = run_launcher({"-H", "/nonexistent/hostfile", "--num_gpus", "1",
                                    "--master_port", kPort, DS_RANK_PROGRAM, "--check-env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("hostfile /nonexistent/hostfile not found"), std::string::npos) << r.err;
  EXPECT_EQ(lines_starting_with(r.out, "[rank0]: env RANK=0 WORLD_SIZE=1").size(), 1u) << r.out;
}

}  // namespace
}  // namespace deepspeed::launcher
