// The local spawner end to end through the real `deepspeed` binary: world environment, prefixed
// output, failure propagation, signal forwarding, and that no rank (or rank's child) outlives the
// launcher.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

#include "launcher/core_binding.h"
#include "launcher_process.h"

namespace deepspeed::launcher {
namespace {

using testing::all_recorded_pids;
using testing::LauncherProcess;
using testing::lines_starting_with;
using testing::run_launcher;
using testing::RunResult;
using testing::TempDir;
using testing::wait_for_rank_pids;
using testing::wait_until_gone;

const std::string kPort = std::to_string(DS_TEST_PORT);
constexpr double kTimeout =
    30;  // generous: the box is shared; nothing here should take more than a few seconds

// The launcher reaped its ranks itself, so their pids must be gone at once (no zombie left either).
void expect_reaped(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    errno = 0;
    EXPECT_EQ(kill(pid, 0), -1) << "pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH) << "pid " << pid;
  }
}

void expect_world(const RunResult& r, int n) {
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Every stdout line comes from a rank, and each rank printed its env line and its flushed partial
  // tail.
  const auto lines = lines_starting_with(r.out, "");
  EXPECT_EQ(lines_starting_with(r.out, "[rank").size(), lines.size()) << r.out;
  for (int rank = 0; rank < n; ++rank) {
    const std::string p = "[rank" + std::to_string(rank) + "]: ";
    const std::string env =
        p + "env RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(n) +
        " LOCAL_RANK=" + std::to_string(rank) + " LOCAL_WORLD_SIZE=" + std::to_string(n) +
        " GROUP_RANK=0 NODE_RANK=0 CROSS_RANK=0 CROSS_SIZE=1 MASTER_ADDR=127.0.0.1 "
        "MASTER_PORT=" +
        kPort;
    EXPECT_EQ(lines_starting_with(r.out, env).size(), 1u) << r.out;
    EXPECT_EQ(lines_starting_with(r.out, p + "tail-" + std::to_string(rank)).size(), 1u) << r.out;
    // stderr stays stderr.
    EXPECT_EQ(
        lines_starting_with(r.err, p + "stderr line from rank " + std::to_string(rank)).size(), 1u)
        << r.err;
    EXPECT_EQ(lines_starting_with(r.err, p + "errtail-" + std::to_string(rank)).size(), 1u)
        << r.err;
  }
  EXPECT_EQ(r.out.find("stderr line"), std::string::npos);
  EXPECT_EQ(static_cast<int>(lines.size()), 2 * n) << r.out;
}

TEST(LocalRunner, TwoRanksSucceedWithEnvAndPrefixedOutput) {
  expect_world(run_launcher({"--num_procs", "2", "--master_port", kPort, DS_RANK_PROGRAM,
                             "--check-env", "--tail"}),
               2);
}

TEST(LocalRunner, FourRanksSucceedWithEnvAndPrefixedOutput) {
  expect_world(run_launcher({"--num_gpus", "4", "--master_port", kPort, DS_RANK_PROGRAM,
                             "--check-env", "--tail"}),
               4);
}

TEST(LocalRunner, ProgramArgumentsArePassedUntouchedAfterLocalRank) {
  const RunResult r = run_launcher(
      {"--num_procs", "1", DS_RANK_PROGRAM, "--print-args", "--num_procs", "", "a b", "--help"});
  // rank_program rejects arguments it does not know, so this exits 12 after printing them.
  EXPECT_EQ(r.exit_code, 12) << r.err;
  EXPECT_NE(r.out.find("[rank0]: arg[0]=--local_rank=0\n[rank0]: arg[1]=--print-args\n"
                       "[rank0]: arg[2]=--num_procs\n[rank0]: arg[3]=\n[rank0]: arg[4]=a b\n"
                       "[rank0]: arg[5]=--help\n"),
            std::string::npos)
      << r.out;
  const RunResult plain =
      run_launcher({"--num_procs", "1", "--no_local_rank", DS_RANK_PROGRAM, "--print-args"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "[rank0]: arg[0]=--print-args\n");
}

TEST(LocalRunner, FailingRankStopsTheOthersAndItsCodeIsReturned) {
  TempDir pids;
  LauncherProcess p({"--num_procs", "4", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--exit-rank", "1", "3"},
                    pids.path());
  ASSERT_TRUE(p.wait(kTimeout)) << "launcher did not stop after a rank failed";
  EXPECT_EQ(p.exit_code(), 3) << p.err();
  const std::vector<pid_t> ranks = wait_for_rank_pids(pids.path(), 4, 0);
  ASSERT_EQ(ranks.size(), 4u);
  std::ifstream f(pids.path() + "/1.pid");
  pid_t failed = 0;
  f >> failed;
  EXPECT_NE(p.err().find("deepspeed: rank 1 (pid " + std::to_string(failed) +
                         ") exited with status 3; stopping 3 other ranks\n"),
            std::string::npos)
      << p.err();
  expect_reaped(ranks);
}

TEST(LocalRunner, RankKilledBySignalGives128PlusSignal) {
  TempDir pids;
  LauncherProcess p({"--num_procs", "2", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--signal-rank", "0", "9"},
                    pids.path());
  ASSERT_TRUE(p.wait(kTimeout));
  EXPECT_EQ(p.exit_code(), 128 + 9) << p.err();
  EXPECT_NE(p.err().find("was killed by SIGKILL; stopping 1 other ranks"), std::string::npos)
      << p.err();
  expect_reaped(all_recorded_pids(pids.path()));
}

TEST(LocalRunner, RanksChildrenDieWithTheirProcessGroup) {
  TempDir pids;
  LauncherProcess p({"--num_procs", "2", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--spawn-child", "--exit-rank", "0", "5"},
                    pids.path());
  ASSERT_TRUE(p.wait(kTimeout));
  EXPECT_EQ(p.exit_code(), 5) << p.err();
  const std::vector<pid_t> recorded = all_recorded_pids(pids.path());
  EXPECT_EQ(recorded.size(), 4u);  // two ranks, two grandchildren
  // Grandchildren are re-parented when killed, so their reaping is not ours: wait for them to
  // vanish.
  EXPECT_TRUE(wait_until_gone(recorded, kTimeout).empty());
}

void signal_launcher_with_hanging_ranks(int sig, bool save_pid) {
  TempDir pids;
  std::vector<std::string> args = {"--num_procs", "2", "--master_port", kPort};
  if (save_pid) args.push_back("--save_pid");
  args.insert(args.end(), {DS_RANK_PROGRAM, "--pid-dir", pids.path(), "--hang"});
  LauncherProcess p(args, pids.path());
  const std::vector<pid_t> ranks = wait_for_rank_pids(pids.path(), 2, kTimeout);
  ASSERT_EQ(ranks.size(), 2u) << p.err();
  const std::string pid_file = "/tmp/" + std::to_string(p.pid()) + ".deepspeed";
  if (save_pid) {
    std::ifstream f(pid_file);
    pid_t recorded = 0;
    f >> recorded;
    EXPECT_EQ(recorded, p.pid());
    EXPECT_NE(p.out().find("launcher pid: " + std::to_string(p.pid())), std::string::npos);
  }
  ASSERT_EQ(kill(p.pid(), sig), 0);
  ASSERT_TRUE(p.wait(kTimeout)) << "launcher ignored the signal";
  EXPECT_EQ(p.exit_code(), 128 + sig) << p.err();
  EXPECT_NE(
      p.err().find("deepspeed: received " + std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") +
                   "; forwarding it to 2 ranks"),
      std::string::npos)
      << p.err();
  expect_reaped(ranks);
  if (save_pid) {
    EXPECT_NE(access(pid_file.c_str(), F_OK), 0) << pid_file << " left behind";
  }
}

TEST(LocalRunner, SigtermToLauncherStopsHangingRanks) {
  signal_launcher_with_hanging_ranks(SIGTERM, true);
}

TEST(LocalRunner, SigintToLauncherStopsHangingRanks) {
  signal_launcher_with_hanging_ranks(SIGINT, false);
}

// A launcher started in the background of a script (`cmd &`) inherits SIGINT ignored; `kill -INT`
// (or SIGTERM, equally ignored) must still stop it and its ranks. The ranks must get the signal at
// its default disposition: had they inherited it ignored, they would run on until the grace
// period's SIGKILL, which the launcher reports.
void signal_launcher_started_ignoring(int sig) {
  TempDir pids;
  LauncherProcess p({"--num_procs", "2", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--hang"},
                    pids.path(), -1, {sig});
  const std::vector<pid_t> ranks = wait_for_rank_pids(pids.path(), 2, kTimeout);
  ASSERT_EQ(ranks.size(), 2u) << p.err();
  ASSERT_EQ(kill(p.pid(), sig), 0);
  ASSERT_TRUE(p.wait(kTimeout)) << "launcher ignored the signal";
  EXPECT_EQ(p.exit_code(), 128 + sig) << p.err();
  const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  EXPECT_NE(p.err().find("deepspeed: received " + name + "; forwarding it to 2 ranks"),
            std::string::npos)
      << p.err();
  EXPECT_EQ(p.err().find("still running"), std::string::npos)
      << "the ranks ignored the forwarded " << name << ": " << p.err();
  expect_reaped(ranks);
}

TEST(LocalRunner, SigintStopsALauncherStartedWithSigintIgnored) {
  signal_launcher_started_ignoring(SIGINT);
}

TEST(LocalRunner, SigtermStopsALauncherStartedWithSigtermIgnored) {
  signal_launcher_started_ignoring(SIGTERM);
}

// nohup: an ignored SIGHUP stays ignored. Signals pending together are read lowest number first,
// so had SIGHUP (1) been caught, the launcher would report it before the SIGTERM (15) sent next.
TEST(LocalRunner, IgnoredSighupStaysIgnored) {
  TempDir pids;
  LauncherProcess p({"--num_procs", "2", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--hang"},
                    pids.path(), -1, {SIGHUP});
  const std::vector<pid_t> ranks = wait_for_rank_pids(pids.path(), 2, kTimeout);
  ASSERT_EQ(ranks.size(), 2u) << p.err();
  ASSERT_EQ(kill(p.pid(), SIGHUP), 0);
  ASSERT_EQ(kill(p.pid(), SIGTERM), 0);
  ASSERT_TRUE(p.wait(kTimeout));
  EXPECT_EQ(p.exit_code(), 128 + SIGTERM) << p.err();
  EXPECT_EQ(p.err().find("SIGHUP"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("deepspeed: received SIGTERM; forwarding it to 2 ranks"),
            std::string::npos)
      << p.err();
  expect_reaped(ranks);
}

TEST(LocalRunner, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir pids;
  LauncherProcess p({"--num_procs", "2", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--ignore-term", "--hang"},
                    pids.path());
  const std::vector<pid_t> ranks = wait_for_rank_pids(pids.path(), 2, kTimeout);
  ASSERT_EQ(ranks.size(), 2u) << p.err();
  ASSERT_EQ(kill(p.pid(), SIGTERM), 0);
  ASSERT_TRUE(p.wait(kTimeout));
  EXPECT_EQ(p.exit_code(), 128 + SIGTERM);
  EXPECT_NE(p.err().find("2 ranks still running 5 s after SIGTERM; sending SIGKILL"),
            std::string::npos)
      << p.err();
  expect_reaped(ranks);
}

TEST(LocalRunner, SigkillToLauncherTakesTheRanksWithIt) {
  // Orphaned ranks are re-parented to us, so we can reap them and a zombie cannot look alive.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  TempDir pids;
  LauncherProcess p({"--num_procs", "3", "--master_port", kPort, DS_RANK_PROGRAM, "--pid-dir",
                     pids.path(), "--hang"},
                    pids.path());
  const std::vector<pid_t> ranks = wait_for_rank_pids(pids.path(), 3, kTimeout);
  ASSERT_EQ(ranks.size(), 3u) << p.err();
  ASSERT_EQ(kill(p.pid(), SIGKILL), 0);
  ASSERT_TRUE(p.wait(kTimeout));
  EXPECT_TRUE(wait_until_gone(ranks, kTimeout).empty()) << "ranks outlived a SIGKILLed launcher";
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(LocalRunner, EachRankLogGoesToItsOwnFile) {
  TempDir logs;
  const RunResult r =
      run_launcher({"--num_procs", "2", "--master_port", kPort, "--enable_each_rank_log",
                    logs.path(), DS_RANK_PROGRAM, "--check-env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << r.out;
  // One file per rank, named <timestamp>_rank<N>.log as DeepSpeed names them.
  std::vector<std::string> names;
  if (DIR* d = opendir(logs.path().c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  ASSERT_EQ(names.size(), 2u);
  std::sort(names.begin(), names.end());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string suffix = "_rank" + std::to_string(rank) + ".log";
    const std::string& n = names[rank];
    ASSERT_GT(n.size(), suffix.size());
    EXPECT_EQ(n.substr(n.size() - suffix.size()), suffix);
    std::ifstream f(logs.path() + "/" + n);
    const std::string content((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
    EXPECT_NE(content.find("env RANK=" + std::to_string(rank) + " WORLD_SIZE=2"),
              std::string::npos);
    EXPECT_NE(content.find("stderr line from rank " + std::to_string(rank)), std::string::npos);
  }
}

TEST(LocalRunner, BindCoresGivesEachRankItsShare) {
  const std::vector<int> cores = allowed_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs at least 2 cores";
  const RunResult r = run_launcher({"--num_procs", "2", "--master_port", kPort,
                                    "--bind_cores_to_rank", DS_RANK_PROGRAM, "--print-affinity"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int> mine = cores_for_rank(cores, 2, rank);
    std::string list;
    for (int c : mine) list += (list.empty() ? "" : ",") + std::to_string(c);
    EXPECT_EQ(lines_starting_with(r.out, "[rank" + std::to_string(rank) + "]: affinity=" + list +
                                             " OMP_NUM_THREADS=" + std::to_string(mine.size()))
                  .size(),
              1u)
        << r.out;
  }
}

}  // namespace
}  // namespace deepspeed::launcher
