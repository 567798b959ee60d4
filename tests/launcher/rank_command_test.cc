// Each rank's argv and environment, and program lookup.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "launcher/local_runner.h"

namespace deepspeed::launcher {
namespace {

std::string get(const std::vector<std::string>& env, const std::string& name) {
  std::string found = "(unset)";
  int count = 0;
  for (const std::string& kv : env) {
    if (kv.compare(0, name.size() + 1, name + "=") == 0) {
      found = kv.substr(name.size() + 1);
      ++count;
    }
  }
  return count > 1 ? "(duplicate)" : found;
}

LocalLaunch second_node_of_two() {
  LocalLaunch l;
  l.program = "./train";
  l.program_args = {"--lr", "0.1"};
  l.master_addr = "10.0.0.1";
  l.master_port = 4321;
  l.node_rank = 1;
  l.num_nodes = 2;
  l.world_size = 5;
  l.first_rank = 3;
  l.slots = {0, 1};
  return l;
}

TEST(RankCommand, ArgvInsertsLocalRankBeforeTheProgramsArguments) {
  LocalLaunch l = second_node_of_two();
  EXPECT_EQ(rank_argv(l, 1),
            (std::vector<std::string>{"./train", "--local_rank=1", "--lr", "0.1"}));
  l.pass_local_rank_arg = false;
  EXPECT_EQ(rank_argv(l, 1), (std::vector<std::string>{"./train", "--lr", "0.1"}));
}

TEST(RankCommand, EnvironmentHasTorchrunAndDeepSpeedVariables) {
  const std::vector<std::string> env =
      rank_environment(second_node_of_two(), 1, {"PATH=/bin", "RANK=99", "HOME=/root"});
  EXPECT_EQ(get(env, "RANK"), "4");
  EXPECT_EQ(get(env, "LOCAL_RANK"), "1");
  EXPECT_EQ(get(env, "WORLD_SIZE"), "5");
  EXPECT_EQ(get(env, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(get(env, "LOCAL_SIZE"), "2");
  EXPECT_EQ(get(env, "GROUP_RANK"), "1");
  EXPECT_EQ(get(env, "GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(get(env, "NODE_RANK"), "1");
  EXPECT_EQ(get(env, "CROSS_RANK"), "1");
  EXPECT_EQ(get(env, "CROSS_SIZE"), "2");
  EXPECT_EQ(get(env, "ROLE_RANK"), "4");
  EXPECT_EQ(get(env, "ROLE_WORLD_SIZE"), "5");
  EXPECT_EQ(get(env, "MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(get(env, "MASTER_PORT"), "4321");
  EXPECT_EQ(get(env, "PATH"), "/bin");
  EXPECT_EQ(get(env, "HOME"), "/root");
  EXPECT_EQ(get(env, "OMP_NUM_THREADS"), "(unset)");
}

// Issue 52: every rank of a launch carries the launch's job identity, replacing an inherited one.
TEST(RankCommand, EveryRankGetsTheJobIdentity) {
  LocalLaunch l = second_node_of_two();
  EXPECT_EQ(get(rank_environment(l, 0, {"DS_JOB_ID=outer"}), "DS_JOB_ID"), "outer");  // none of its own: left as is
  l.job_id = "0123456789abcdef0123456789abcdef";
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(get(rank_environment(l, r, {"DS_JOB_ID=outer"}), "DS_JOB_ID"), l.job_id);
}

TEST(RankCommand, BoundCoresSetOmpNumThreads) {
  LocalLaunch l = second_node_of_two();
  l.bind_cores = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_EQ(get(rank_environment(l, 0, {"OMP_NUM_THREADS=8"}), "OMP_NUM_THREADS"), "3");
}

TEST(RankCommand, ResolveProgram) {
  EXPECT_EQ(resolve_program("/bin/sh"), "/bin/sh");
  const std::string sh = resolve_program("sh");
  EXPECT_EQ(sh.substr(sh.size() - 3), "/sh");
  try {
    resolve_program("/nonexistent/prog");
    ADD_FAILURE() << "expected LaunchError";
  } catch (const LaunchError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot execute program '/nonexistent/prog': No such file or directory");
  }
  char plain[] = "/tmp/ds_not_executable.XXXXXX";
  const int fd = mkstemp(plain);  // mode 0600: no x bit
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_THROW(resolve_program(plain), LaunchError);
  unlink(plain);
  EXPECT_THROW(resolve_program("/tmp"), LaunchError);  // a directory
  EXPECT_THROW(resolve_program("surely-no-such-program-xyz"), LaunchError);
}

}  // namespace
}  // namespace deepspeed::launcher
