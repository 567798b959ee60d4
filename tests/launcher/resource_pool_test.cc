// --include/--exclude syntax and semantics, --num_nodes/--num_gpus limits, local resources, core
// lists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "launcher/launcher.h"
#include "launcher/core_binding.h"

namespace deepspeed::launcher {
namespace {

ResourcePool pool3() {
  return {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}, {"worker-2", {0, 1}}};
}

std::string filter_error(const std::string& include, const std::string& exclude) {
  try {
    parse_resource_filter(pool3(), include, exclude);
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(NodeConfigList, ParsesHostsAndSlots) {
  const std::vector<HostSlots> spec = parse_node_config_list("worker-0@worker-1:0,2");
  ASSERT_EQ(spec.size(), 2u);
  EXPECT_EQ(spec[0], (HostSlots{"worker-0", {}}));
  EXPECT_EQ(spec[1], (HostSlots{"worker-1", {0, 2}}));
}

TEST(NodeConfigList, MergesRepeatedHostsSortedAndUnique) {
  const std::vector<HostSlots> spec = parse_node_config_list("a:3,1@b@a:1,0");
  ASSERT_EQ(spec.size(), 2u);
  EXPECT_EQ(spec[0], (HostSlots{"a", {0, 1, 3}}));
  EXPECT_EQ(spec[1], (HostSlots{"b", {}}));
}

TEST(NodeConfigList, RejectsMalformedSpecs) {
  EXPECT_THROW(parse_node_config_list("a@@b"), LaunchError);
  EXPECT_THROW(parse_node_config_list("@a"), LaunchError);
  EXPECT_THROW(parse_node_config_list(":0"), LaunchError);
  EXPECT_THROW(parse_node_config_list("a:0:1"), LaunchError);
  EXPECT_THROW(parse_node_config_list("a:"), LaunchError);
  EXPECT_THROW(parse_node_config_list("a:0,,1"), LaunchError);
  EXPECT_THROW(parse_node_config_list("a:x"), LaunchError);
  EXPECT_THROW(parse_node_config_list("a:-1"), LaunchError);
  try {
    parse_node_config_list("a:1,zz");
  } catch (const LaunchError& e) {
    EXPECT_EQ(std::string(e.what()),
              "bad slot 'zz' for host 'a' in 'a:1,zz'; slots are non-negative integers");
  }
}

TEST(ResourceFilter, NoFilterReturnsPoolUnchanged) {
  EXPECT_EQ(parse_resource_filter(pool3(), "", ""), pool3());
}

TEST(ResourceFilter, IncludeKeepsOnlyNamedHostsAndSlotsInPoolOrder) {
  const ResourcePool got = parse_resource_filter(pool3(), "worker-2@worker-0:1,3", "");
  const ResourcePool want = {{"worker-0", {1, 3}}, {"worker-2", {0, 1}}};
  EXPECT_EQ(got, want);
}

TEST(ResourceFilter, ExcludeRemovesSlotsAndWholeHosts) {
  const ResourcePool got = parse_resource_filter(pool3(), "", "worker-1@worker-0:0,3");
  const ResourcePool want = {{"worker-0", {1, 2}}, {"worker-2", {0, 1}}};
  EXPECT_EQ(got, want);
}

TEST(ResourceFilter, ExcludingEverySlotOfAHostDropsIt) {
  const ResourcePool got = parse_resource_filter(pool3(), "", "worker-2:0,1");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].host, "worker-1");
}

TEST(ResourceFilter, IncludeAndExcludeTogetherIsAnError) {
  EXPECT_EQ(filter_error("worker-0", "worker-1"),
            "--include and --exclude are mutually exclusive; give one of them");
}

TEST(ResourceFilter, UnknownHostIsAnErrorNamingIt) {
  EXPECT_EQ(
      filter_error("worker-9", ""),
      "--include names host 'worker-9', which is not in the resource pool (worker-0, worker-1, "
      "worker-2)");
  EXPECT_EQ(
      filter_error("", "worker-9:0"),
      "--exclude names host 'worker-9', which is not in the resource pool (worker-0, worker-1, "
      "worker-2)");
}

TEST(ResourceFilter, UnknownSlotIsAnErrorNamingIt) {
  EXPECT_EQ(filter_error("worker-2:2", ""),
            "--include names slot 2 on host 'worker-2', which has slots 0,1");
  EXPECT_EQ(filter_error("", "worker-0:7"),
            "--exclude names slot 7 on host 'worker-0', which has slots 0,1,2,3");
}

TEST(ResourceFilter, IncludeChecksAgainstRemainingSlots) {
  const ResourcePool narrowed = {{"a", {1, 3}}};
  EXPECT_THROW(parse_resource_filter(narrowed, "a:0", ""), LaunchError);
  EXPECT_EQ(parse_resource_filter(narrowed, "a:3", ""), (ResourcePool{{"a", {3}}}));
}

TEST(Limits, NumNodesTakesTheFirstHosts) {
  const ResourcePool got = limit_num_nodes(pool3(), 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].host, "worker-1");
  EXPECT_EQ(limit_num_nodes(pool3(), 10).size(), 3u);
  EXPECT_THROW(limit_num_nodes(pool3(), 0), LaunchError);
}

TEST(Limits, NumGpusSetsSlotsZeroToNOnEveryHost) {
  const ResourcePool got = limit_num_gpus(pool3(), 3);
  for (const HostSlots& h : got) EXPECT_EQ(h.slots, (std::vector<int>{0, 1, 2})) << h.host;
  EXPECT_EQ(world_size(got), 9);
  EXPECT_THROW(limit_num_gpus(pool3(), 0), LaunchError);
  EXPECT_THROW(limit_num_gpus(pool3(), -3), LaunchError);
}

TEST(Limits, WorldSizeCountsAllSlots) { EXPECT_EQ(world_size(pool3()), 10); }

TEST(LocalResources, LocalSizeEnvOverridesNumaCount) {
  const char* old = std::getenv("LOCAL_SIZE");
  const std::string saved = old ? old : "";
  setenv("LOCAL_SIZE", "3", 1);
  EXPECT_EQ(local_device_count(), 3);
  setenv("LOCAL_SIZE", "junk", 1);
  EXPECT_GE(local_device_count(), 1);
  if (old) {
    setenv("LOCAL_SIZE", saved.c_str(), 1);
  } else {
    unsetenv("LOCAL_SIZE");
  }
}

TEST(LocalResources, RecognisesThisHost) {
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  char name[256] = {0};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(is_local_host(name));
  EXPECT_FALSE(is_local_host("surely-not-this-host.invalid"));
  EXPECT_FALSE(is_local_host("10.255.255.254"));
}

TEST(CoreBinding, ParsesCoreLists) {
  EXPECT_EQ(parse_core_list("1,3-5,7"), (std::vector<int>{1, 3, 4, 5, 7}));
  EXPECT_EQ(parse_core_list("4,0-1,1"), (std::vector<int>{0, 1, 4}));
  EXPECT_THROW(parse_core_list("5-3"), LaunchError);
  EXPECT_THROW(parse_core_list("1,,2"), LaunchError);
  EXPECT_THROW(parse_core_list("a"), LaunchError);
  EXPECT_THROW(parse_core_list("1-2-3"), LaunchError);
}

TEST(CoreBinding, SplitsCoresEvenlyAndDropsTheRemainder) {
  const std::vector<int> cores = {0, 1, 2, 3, 4, 5, 6};
  EXPECT_EQ(cores_for_rank(cores, 3, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(cores_for_rank(cores, 3, 2), (std::vector<int>{4, 5}));
  EXPECT_THROW(cores_for_rank({0, 1}, 3, 0), LaunchError);
  EXPECT_FALSE(allowed_cores().empty());
}

}  // namespace
}  // namespace deepspeed::launcher
