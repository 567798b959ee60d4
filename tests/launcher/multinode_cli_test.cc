// Multi-node runs of the real `deepspeed` binary with a stand-in `ssh` on $PATH that "connects" by
// running the command here in an emptied environment, as sshd would give it (env -i): the runner's
// reachability check, master address lookup, exports, quoting, pdsh and ssh backends, and teardown
// when one host fails, all without a second machine. tests/launcher/multinode_netns_test.sh runs
// the same through real sshd across network namespaces.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "launcher/world_info.h"
#include "launcher_process.h"

namespace deepspeed::launcher {
namespace {

using testing::LauncherProcess;
using testing::lines_starting_with;
using testing::run_launcher;
using testing::RunResult;
using testing::TempDir;

const std::string kPort = std::to_string(DS_TEST_PORT);

constexpr char kFakeSsh[] = R"(#!/bin/sh
# Stand-in for ssh: the host is this machine; hosts named bad-* refuse connections.
[ -n "$FAKE_SSH_LOG" ] && echo "ssh $*" >> "$FAKE_SSH_LOG"
while [ $# -gt 0 ]; do
  case "$1" in -o|-p|-l|-i) shift 2;; -*) shift;; *) break;; esac
done
host=$1; shift
case "$host" in bad-*) echo "ssh: connect to host $host port 22: Connection refused" >&2; exit 255;; esac
if [ "$*" = "hostname -I" ]; then echo "127.0.0.1 192.0.2.1"; exit 0; fi
# Like sshd, the command runs in a session of its own: signals to this "ssh" do not reach it, and
# it learns that the connection is gone only when its stdin closes.
exec setsid -w env -i PATH=/usr/bin:/bin HOME="$HOME" /bin/sh -c "$*"
)";

// $PATH with the fake ssh first, restored afterwards; a hostfile and a .deepspeed_env next to it.
class MultiNodeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = dir_.path() + "/bin";
    ::mkdir(bin_.c_str(), 0755);
    std::ofstream(bin_ + "/ssh") << kFakeSsh;
    ::chmod((bin_ + "/ssh").c_str(), 0755);
    saved_path_ = std::getenv("PATH");
    setenv("PATH", (bin_ + ":" + saved_path_).c_str(), 1);
    hostfile_ = dir_.path() + "/hostfile";
    std::ofstream(hostfile_) << "node-a slots=2\nnode-b slots=2\n";
    std::ofstream(dir_.path() + "/env") << "FROM_FILE=hello world\n";
    setenv("DS_ENV_FILE", (dir_.path() + "/env").c_str(), 1);
    setenv("NCCL_TEST_EXPORT", "x y", 1);
  }
  void TearDown() override {
    setenv("PATH", saved_path_.c_str(), 1);
    unsetenv("DS_ENV_FILE");
    unsetenv("NCCL_TEST_EXPORT");
  }
  static bool have_pdsh() { return std::system("command -v pdsh > /dev/null 2>&1") == 0; }

  std::vector<std::string> launch_args(const std::string& backend) const {
    return {"-H", hostfile_, "--launcher", backend, "--master_port", kPort, DS_RANK_PROGRAM};
  }

  // Every rank's environment, exports and a hard-to-quote argument arrived intact.
  void expect_four_ranks(const RunResult& r, const std::string& backend) {
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(
        r.err.find("deepspeed: " + backend + " run on 2 hosts, 4 ranks, master 127.0.0.1:" + kPort),
        std::string::npos)
        << r.err;
    for (int rank = 0; rank < 4; ++rank) {
      const std::string host = rank < 2 ? "node-a" : "node-b";
      const std::string p = host + ": [rank" + std::to_string(rank) + "]: ";
      EXPECT_EQ(lines_starting_with(
                    r.out, p + "env RANK=" + std::to_string(rank) +
                               " WORLD_SIZE=4 LOCAL_RANK=" + std::to_string(rank % 2) +
                               " LOCAL_WORLD_SIZE=2 GROUP_RANK=" + std::to_string(rank / 2))
                    .size(),
                1u)
          << r.out;
      EXPECT_EQ(lines_starting_with(r.out, p + "env NCCL_TEST_EXPORT=x y").size(), 1u) << r.out;
      EXPECT_EQ(lines_starting_with(r.out, p + "env FROM_FILE=hello world").size(), 1u) << r.out;
      EXPECT_EQ(lines_starting_with(r.out, p + "env NOT_EXPORTED=(unset)").size(), 1u) << r.out;
      EXPECT_EQ(lines_starting_with(r.out, p + "arg[9]=it's \"$HOME\" `x` %n %h;").size(), 1u)
          << r.out;
    }
  }

  std::vector<std::string> check_args() const {
    return {"--check-env",  "--print-env", "NCCL_TEST_EXPORT",
            "--print-env",  "FROM_FILE",   "--print-env",
            "NOT_EXPORTED", "--word",      "it's \"$HOME\" `x` %n %h;",
            "--print-args"};
  }

  TempDir dir_;
  std::string bin_;
  std::string saved_path_;
  std::string hostfile_;
};

TEST_F(MultiNodeCli, SshBackendStartsEveryHostsRanks) {
  setenv("NOT_EXPORTED", "1", 1);
  std::vector<std::string> args = launch_args("ssh");
  for (const std::string& a : check_args()) args.push_back(a);
  const RunResult r = run_launcher(args);
  unsetenv("NOT_EXPORTED");
  expect_four_ranks(r, "ssh");
}

TEST_F(MultiNodeCli, PdshBackendStartsEveryHostsRanks) {
  if (!have_pdsh()) GTEST_SKIP() << "pdsh is not installed (scripts/setup.sh installs it)";
  std::vector<std::string> args = launch_args("pdsh");
  for (const std::string& a : check_args()) args.push_back(a);
  expect_four_ranks(run_launcher(args), "pdsh");
}

TEST_F(MultiNodeCli, UnreachableHostIsNamedBeforeAnythingStarts) {
  std::ofstream(hostfile_) << "node-a slots=2\nbad-b slots=2\n";
  const RunResult r = run_launcher(launch_args("ssh"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "deepspeed: error: host 'bad-b' is not reachable over ssh (ssh exited with status 255: "
            "ssh: connect to host bad-b port 22: Connection refused); set up passwordless ssh to "
            "it, or pass --no_ssh_check to skip this check\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(MultiNodeCli, MissingBackendProgramIsNamed) {
  setenv("PATH", bin_.c_str(), 1);  // only the fake ssh
  const RunResult r = run_launcher(launch_args("openmpi"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "deepspeed: error: --launcher openmpi needs mpirun, which is not on $PATH\n");
}

TEST_F(MultiNodeCli, SshPortAndNumGpusReachEveryCall) {
  if (!have_pdsh()) GTEST_SKIP() << "pdsh is not installed (scripts/setup.sh installs it)";
  const std::string calls = dir_.path() + "/ssh_calls";
  setenv("FAKE_SSH_LOG", calls.c_str(), 1);
  std::vector<std::string> args = launch_args("pdsh");
  args.insert(args.begin(), {"--ssh_port", "2200", "--num_gpus", "1"});
  args.push_back("--check-env");
  const RunResult r = run_launcher(args);
  unsetenv("FAKE_SSH_LOG");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One rank per host: ranks 0 and 1, on node-a and node-b.
  EXPECT_EQ(lines_starting_with(r.out,
                                "node-a: [rank0]: env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 "
                                "LOCAL_WORLD_SIZE=1")
                .size(),
            1u)
      << r.out;
  EXPECT_EQ(lines_starting_with(r.out, "node-b: [rank1]: env RANK=1 WORLD_SIZE=2").size(), 1u)
      << r.out;
  // The checks, the address lookup and pdsh's own ssh commands all used the port.
  std::ifstream in(calls);
  int with_port = 0;
  int total = 0;
  for (std::string line; std::getline(in, line); ++total) {
    if (line.find(" -p 2200 ") != std::string::npos) ++with_port;
  }
  EXPECT_EQ(total, 5);  // 2 checks, 1 hostname -I, 2 node launchers
  EXPECT_EQ(with_port, total);
}

// One host's rank fails: the job stops everywhere, the launcher returns that rank's code and says
// which host failed.
void expect_teardown(const std::vector<std::string>& base, const std::string& pid_dir,
                     const std::string& work_dir, const std::string& host_message) {
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--pid-dir", pid_dir, "--exit-rank", "3", "7", "--wait-world"});
  LauncherProcess p(args, work_dir);
  ASSERT_TRUE(p.wait(60)) << "launcher hung\n" << p.err();
  EXPECT_EQ(p.exit_code(), 7) << p.err();
  EXPECT_NE(p.err().find(host_message), std::string::npos) << p.err();
  const std::vector<pid_t> pids = testing::wait_for_rank_pids(pid_dir, 4, 1);
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_EQ(testing::wait_until_gone(testing::all_recorded_pids(pid_dir), 20),
            std::vector<pid_t>{});
}

TEST_F(MultiNodeCli, FailingHostStopsTheOthersOverSsh) {
  const std::string pids = dir_.path() + "/pids";
  ::mkdir(pids.c_str(), 0755);
  expect_teardown(launch_args("ssh"), pids, dir_.path(), "deepspeed: host node-b (pid ");
}

TEST_F(MultiNodeCli, FailingHostStopsTheOthersOverPdsh) {
  if (!have_pdsh()) GTEST_SKIP() << "pdsh is not installed (scripts/setup.sh installs it)";
  const std::string pids = dir_.path() + "/pids";
  ::mkdir(pids.c_str(), 0755);
  expect_teardown(launch_args("pdsh"), pids, dir_.path(),
                  "deepspeed: host node-b failed (exit code 7); stopping the job");
}

// Ctrl-C (SIGINT) on the launcher stops every host's ranks: pdsh gets SIGTERM (one SIGINT only
// makes it print its status), ssh sessions are closed.
void expect_interrupt_stops_everything(const std::vector<std::string>& base,
                                       const std::string& pid_dir, const std::string& work_dir) {
  std::vector<std::string> args = base;
  for (const std::string& a : {std::string("--pid-dir"), pid_dir, std::string("--hang")}) {
    args.push_back(a);
  }
  LauncherProcess p(args, work_dir);
  const std::vector<pid_t> ranks = testing::wait_for_rank_pids(pid_dir, 4, 30);
  ASSERT_EQ(ranks.size(), 4u) << p.err();
  ASSERT_EQ(::kill(p.pid(), SIGINT), 0);
  ASSERT_TRUE(p.wait(30)) << "launcher hung after SIGINT\n" << p.err();
  EXPECT_EQ(p.exit_code(), 128 + SIGINT) << p.err();
  EXPECT_NE(p.err().find("deepspeed: received SIGINT; forwarding it to "), std::string::npos)
      << p.err();
  EXPECT_EQ(testing::wait_until_gone(ranks, 20), std::vector<pid_t>{});
}

TEST_F(MultiNodeCli, InterruptStopsEveryHostOverSsh) {
  const std::string pids = dir_.path() + "/pids";
  ::mkdir(pids.c_str(), 0755);
  expect_interrupt_stops_everything(launch_args("ssh"), pids, dir_.path());
}

TEST_F(MultiNodeCli, InterruptStopsEveryHostOverPdsh) {
  if (!have_pdsh()) GTEST_SKIP() << "pdsh is not installed (scripts/setup.sh installs it)";
  const std::string pids = dir_.path() + "/pids";
  ::mkdir(pids.c_str(), 0755);
  expect_interrupt_stops_everything(launch_args("pdsh"), pids, dir_.path());
}

TEST_F(MultiNodeCli, SavePidIsTheLaunchersOwn) {
  std::vector<std::string> args = launch_args("ssh");
  args.insert(args.begin(), "--save_pid");
  const RunResult r = run_launcher(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Only this launcher prints its pid; the node launchers are not given --save_pid.
  EXPECT_EQ(lines_starting_with(r.out, "launcher pid: ").size(), 1u) << r.out;
  EXPECT_EQ(testing::count_lines(r.out), 1) << r.out;
}

// The node-local launcher a runner starts stops its ranks when the runner's connection (its stdin)
// closes: how a killed head node or a torn-down ssh session reaches the remote ranks.
TEST_F(MultiNodeCli, NodeLauncherStopsItsRanksWhenStdinCloses) {
  const std::string pids = dir_.path() + "/pids";
  ::mkdir(pids.c_str(), 0755);
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);  // only the launcher's stdin holds the read end
  LauncherProcess p({"--world_info=" + encode_world_info({{"localhost", {0, 1}}}), "--node_rank=0",
                     "--master_addr=127.0.0.1", "--master_port", kPort, "--stop_on_stdin_eof",
                     DS_RANK_PROGRAM, "--pid-dir", pids, "--hang"},
                    dir_.path(), in[0]);
  ::close(in[0]);
  const std::vector<pid_t> ranks = testing::wait_for_rank_pids(pids, 2, 30);
  ASSERT_EQ(ranks.size(), 2u) << p.err();
  EXPECT_FALSE(p.wait(0.5)) << "stopped while stdin was open\n" << p.err();
  ::close(in[1]);
  ASSERT_TRUE(p.wait(30)) << p.err();
  EXPECT_EQ(p.exit_code(), 129);
  EXPECT_NE(p.err().find("deepspeed: the launcher that started this node is gone (stdin closed); "
                         "stopping 2 ranks"),
            std::string::npos)
      << p.err();
  EXPECT_EQ(testing::wait_until_gone(ranks, 20), std::vector<pid_t>{});
}

}  // namespace
}  // namespace deepspeed::launcher
