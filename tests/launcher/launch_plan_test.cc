// plan_launch(): which world DeepSpeed's rules produce, and which launches are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "launcher/launcher.h"

namespace deepspeed::launcher {
namespace {

LauncherArgs args_for(const std::string& program = "prog") {
  LauncherArgs a;
  a.user_script = program;
  return a;
}

std::string plan_error(const LauncherArgs& a, const std::optional<ResourcePool>& pool) {
  try {
    plan_launch(a, pool);
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

class LaunchPlan : public ::testing::Test {
 protected:
  // Local resources without a hostfile follow $LOCAL_SIZE; pin it so the tests do not depend on
  // NUMA layout.
  void SetUp() override {
    const char* old = std::getenv("LOCAL_SIZE");
    had_ = old != nullptr;
    if (had_) saved_ = old;
    setenv("LOCAL_SIZE", "2", 1);
  }
  void TearDown() override {
    if (had_) {
      setenv("LOCAL_SIZE", saved_.c_str(), 1);
    } else {
      unsetenv("LOCAL_SIZE");
    }
  }
  bool had_ = false;
  std::string saved_;
};

TEST_F(LaunchPlan, NoHostfileUsesLocalResources) {
  LauncherArgs a = args_for();
  a.user_args = {"--x", "1"};
  const LocalLaunch l = plan_launch(a, std::nullopt);
  EXPECT_EQ(l.program, "prog");
  EXPECT_EQ(l.program_args, (std::vector<std::string>{"--x", "1"}));
  EXPECT_EQ(l.slots, (std::vector<int>{0, 1}));
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.first_rank, 0);
  EXPECT_EQ(l.node_rank, 0);
  EXPECT_EQ(l.num_nodes, 1);
  EXPECT_EQ(l.master_addr, "127.0.0.1");
  EXPECT_EQ(l.master_port, 29500);
  EXPECT_TRUE(l.pass_local_rank_arg);
}

TEST_F(LaunchPlan, NumGpusSetsProcessesPerNode) {
  LauncherArgs a = args_for();
  a.num_gpus = 5;
  a.master_port = 1234;
  a.no_local_rank = true;
  const LocalLaunch l = plan_launch(a, std::nullopt);
  EXPECT_EQ(l.world_size, 5);
  EXPECT_EQ(l.slots.size(), 5u);
  EXPECT_EQ(l.master_port, 1234);
  EXPECT_FALSE(l.pass_local_rank_arg);
}

TEST_F(LaunchPlan, IncludeOnLocalResources) {
  LauncherArgs a = args_for();
  a.include = "localhost:1";
  const LocalLaunch l = plan_launch(a, std::nullopt);
  EXPECT_EQ(l.slots, (std::vector<int>{1}));
  EXPECT_EQ(l.world_size, 1);
  a.include = "localhost:2";
  EXPECT_EQ(plan_error(a, std::nullopt),
            "--include names slot 2 on host 'localhost', which has slots 0,1");
}

TEST_F(LaunchPlan, NumNodesAboveOneWithoutHostfileIsAnError) {
  LauncherArgs a = args_for();
  a.num_nodes = 2;
  EXPECT_EQ(plan_error(a, std::nullopt),
            "--num_nodes 2 but there is no hostfile at /job/hostfile to list other nodes");
}

TEST_F(LaunchPlan, NumGpusWithIncludeIsAnError) {
  LauncherArgs a = args_for();
  a.num_gpus = 1;
  a.exclude = "localhost:0";
  EXPECT_EQ(
      plan_error(a, std::nullopt),
      "--num_nodes/--num_gpus cannot be combined with --include/--exclude; use one or the other");
}

TEST_F(LaunchPlan, SingleLocalHostFromHostfileRunsLocally) {
  const ResourcePool pool = {{"localhost", {0, 1, 2}}};
  LauncherArgs a = args_for();
  const LocalLaunch l = plan_launch(a, pool);
  EXPECT_EQ(l.world_size, 3);
  EXPECT_EQ(l.master_addr, "127.0.0.1");
  char name[256] = {0};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_EQ(plan_launch(a, ResourcePool{{name, {0}}}).world_size, 1);
}

TEST_F(LaunchPlan, FiltersThatLeaveOneLocalHostRunLocally) {
  const ResourcePool pool = {{"remote-a", {0, 1}}, {"localhost", {0, 1, 2, 3}}};
  LauncherArgs a = args_for();
  a.include = "localhost:0,2";
  const LocalLaunch l = plan_launch(a, pool);
  EXPECT_EQ(l.slots, (std::vector<int>{0, 2}));
  EXPECT_EQ(l.world_size, 2);
  a.include = "";
  a.exclude = "remote-a";
  EXPECT_EQ(plan_launch(a, pool).world_size, 4);
}

TEST_F(LaunchPlan, RemoteOrMultipleHostsNeedTheMultiNodeRunner) {
  LauncherArgs a = args_for();
  const ResourcePool two{{"remote-a", {0}}, {"remote-b", {0}}};
  EXPECT_TRUE(needs_multinode(a, two));
  EXPECT_TRUE(needs_multinode(a, ResourcePool{{"remote-a", {0}}}));
  EXPECT_FALSE(needs_multinode(a, ResourcePool{{"localhost", {0, 1}}}));
  EXPECT_FALSE(needs_multinode(a, std::nullopt));
  EXPECT_EQ(plan_error(a, two),
            "the run spans 2 host(s) (remote-a, remote-b): it needs the multi-node runner "
            "(run_multinode), not plan_launch");
  a.force_multi = true;  // DeepSpeed's --force_multi: the runner even for this host alone
  EXPECT_TRUE(needs_multinode(a, ResourcePool{{"localhost", {0, 1}}}));
  a.force_multi = false;
  a.no_ssh = true;  // each node started by hand: never the runner
  a.node_rank = 1;
  a.master_addr = "remote-a";
  EXPECT_FALSE(needs_multinode(a, two));
  EXPECT_EQ(plan_launch(a, two).first_rank, 1);
}

TEST_F(LaunchPlan, NumNodesPicksTheFirstHosts) {
  LauncherArgs a = args_for();
  a.num_nodes = 1;
  a.num_gpus = 2;
  const LocalLaunch l = plan_launch(a, ResourcePool{{"localhost", {0, 1, 2, 3}}, {"remote", {0}}});
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.num_nodes, 1);
}

TEST_F(LaunchPlan, NoSshRunsThisNodesShareWithOffsetRanks) {
  const ResourcePool pool = {{"n0", {0, 1, 2}}, {"n1", {0, 1}}, {"n2", {0, 1, 2, 3}}};
  LauncherArgs a = args_for();
  a.no_ssh = true;
  a.node_rank = 2;
  a.master_addr = "10.1.2.3";
  const LocalLaunch l = plan_launch(a, pool);
  EXPECT_EQ(l.node_rank, 2);
  EXPECT_EQ(l.num_nodes, 3);
  EXPECT_EQ(l.world_size, 9);
  EXPECT_EQ(l.first_rank, 5);
  EXPECT_EQ(l.slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(l.master_addr, "10.1.2.3");
}

TEST_F(LaunchPlan, NoSshNeedsAValidNodeRankAndAMasterAddr) {
  const ResourcePool pool = {{"n0", {0}}, {"n1", {0}}};
  LauncherArgs a = args_for();
  a.no_ssh = true;
  a.master_addr = "10.1.2.3";
  EXPECT_EQ(plan_error(a, pool), "--no_ssh needs --node_rank in [0, 2), got -1");
  a.node_rank = 2;
  EXPECT_EQ(plan_error(a, pool), "--no_ssh needs --node_rank in [0, 2), got 2");
  a.node_rank = 1;
  a.master_addr = "";
  EXPECT_EQ(plan_error(a, pool),
            "--no_ssh across 2 nodes needs --master_addr (the address of node 0, 'n0')");
}

TEST_F(LaunchPlan, NoSshOnOneRemoteHostRunsLocally) {
  LauncherArgs a = args_for();
  a.no_ssh = true;
  a.node_rank = 0;
  const LocalLaunch l = plan_launch(a, ResourcePool{{"remote-a", {0, 1}}});
  EXPECT_EQ(l.world_size, 2);
  EXPECT_EQ(l.master_addr, "127.0.0.1");
}

TEST_F(LaunchPlan, BindCores) {
  LauncherArgs a = args_for();
  a.bind_cores_to_rank = true;
  a.bind_core_list = "0-5";
  EXPECT_EQ(plan_launch(a, std::nullopt).bind_cores, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  a.bind_core_list = "3";
  EXPECT_EQ(plan_error(a, std::nullopt),
            "--bind_cores_to_rank: 1 cores for 2 local ranks; each rank needs at least one core");
  a.bind_cores_to_rank = false;
  EXPECT_EQ(plan_error(a, std::nullopt), "--bind_core_list needs --bind_cores_to_rank");
}

TEST_F(LaunchPlan, EmptyAfterExcludeIsAnError) {
  LauncherArgs a = args_for();
  a.exclude = "localhost";
  EXPECT_EQ(plan_error(a, std::nullopt), "no resources left after --include/--exclude");
}

}  // namespace
}  // namespace deepspeed::launcher
