// The job identity each launch hands its ranks (issue 52), and how many ranks one node may start.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <set>

#include "deepspeed/error.h"
#include "launcher/job_id.h"
#include "launcher/rank_limit.h"

namespace deepspeed::launcher {
namespace {

TEST(JobId, FreshIdentitiesAreLongRandomAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = new_job_id();
    ASSERT_EQ(id.size(), 32u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(JobId, WhoseIdentityARunTakes) {
  LauncherArgs local;
  EXPECT_EQ(job_id_for(local, 1, "").size(), 32u);                      // a fresh one per launch
  EXPECT_NE(job_id_for(local, 1, ""), job_id_for(local, 1, ""));
  EXPECT_EQ(job_id_for(local, 1, "sched-42"), "sched-42");              // a scheduler's, when it gave one
  EXPECT_EQ(job_id_for(local, 3, "").size(), 32u);                      // a multi-node head draws it once
  LauncherArgs node;
  node.world_info = "e30=";
  EXPECT_EQ(job_id_for(node, 2, "from-head"), "from-head");             // a node takes the head's
  EXPECT_EQ(job_id_for(node, 2, ""), "");                               // or none: each would draw another
  LauncherArgs no_ssh;
  no_ssh.no_ssh = true;
  EXPECT_EQ(job_id_for(no_ssh, 2, ""), "");
  EXPECT_EQ(job_id_for(no_ssh, 2, "all-nodes"), "all-nodes");
  EXPECT_EQ(job_id_for(no_ssh, 1, "").size(), 32u);                     // one node: nothing to agree with
}

// Issue 52: --num_procs 10000 forked ~10,000 ranks before failing on open files.
TEST(RankLimit, SanityBoundFollowsTheCoresAndCanBeSet) {
  EXPECT_EQ(local_rank_limit(2, nullptr), kMinRankLimit);
  EXPECT_EQ(local_rank_limit(32, nullptr), 32 * kRanksPerCore);
  EXPECT_EQ(local_rank_limit(2, ""), kMinRankLimit);
  EXPECT_EQ(local_rank_limit(2, "20000"), 20000);
  for (const char* bad : {"0", "-3", "many", "12x", "99999999999"}) {
    try {
      local_rank_limit(2, bad);
      ADD_FAILURE() << bad;
    } catch (const LaunchError& e) {
      EXPECT_NE(std::string(e.what()).find("DS_MAX_LOCAL_RANKS='" + std::string(bad) + "' must be a positive integer"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(RankLimit, TenThousandRanksAreRefusedBeforeAnyStarts) {
  ::unsetenv(kMaxLocalRanksVar);
  EXPECT_NO_THROW(check_local_rank_count(4));
  try {
    check_local_rank_count(10000);
    ADD_FAILURE() << "10000 ranks accepted";
  } catch (const LaunchError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cannot start 10000 ranks on this node (--num_procs/--num_gpus or the hostfile's slots): "
                         "more than ",
                         0),
              0u)
        << what;
    EXPECT_NE(what.find("set DS_MAX_LOCAL_RANKS=10000"), std::string::npos) << what;
  }
  // Lifted, the launcher's own open files are the bound left: under a hard ulimit -n of (at most) 1024, soft and hard
  // alike so raising the soft limit cannot help, the ranks that fit are accepted and one more than fits is refused.
  ::setenv(kMaxLocalRanksVar, "100000", 1);
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  const rlim_t cap = files.rlim_max == RLIM_INFINITY ? 1024 : std::min<rlim_t>(files.rlim_max, 1024);
  files.rlim_cur = files.rlim_max = cap;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  const int fit = static_cast<int>((cap - 64) / 3);  // rank_limit.cc: 3 per rank beside 64 of its own
  EXPECT_NO_THROW(check_local_rank_count(fit));
  try {
    check_local_rank_count(fit + 1);
    ADD_FAILURE() << fit + 1 << " ranks accepted under ulimit -n " << cap;
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("open files in the launcher"), std::string::npos) << e.what();
  }
  // The soft limit is raised as far as the ranks need, no further: ranks inherit it.
  files.rlim_cur = 100;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  EXPECT_NO_THROW(check_local_rank_count(50));
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  EXPECT_EQ(files.rlim_cur, std::min<rlim_t>(cap, 50 * 3 + 64));
  ::unsetenv(kMaxLocalRanksVar);
}

}  // namespace
}  // namespace deepspeed::launcher
