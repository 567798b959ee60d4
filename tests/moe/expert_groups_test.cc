// moe::expert_groups caches its groups per world (comm::world_generation): after destroy_process_group and a new
// init_distributed it must build them again, not hand out handles of the destroyed world.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "deepspeed/comm.h"
#include "deepspeed/moe/layer.h"

namespace comm = deepspeed::comm;
namespace moe = deepspeed::moe;

TEST(ExpertGroups, ANewWorldGetsGroupsOfItsOwn) {
  if (comm::is_initialized()) comm::destroy_process_group();
  comm::init_distributed();  // a single-process world (no launcher variables here)
  const int64_t first_world = comm::world_generation();
  moe::ExpertGroups first = moe::expert_groups(1);
  EXPECT_EQ(moe::expert_groups(1).expert_data_parallel.ranks(), first.expert_data_parallel.ranks());
  comm::destroy_process_group();
  EXPECT_EQ(comm::world_generation(), 0);

  comm::init_distributed();
  EXPECT_NE(comm::world_generation(), first_world);
  moe::ExpertGroups second = moe::expert_groups(1);
  at::Tensor t = at::ones({4});
  EXPECT_NO_THROW(second.expert_data_parallel.all_reduce(t));
  EXPECT_TRUE(at::equal(t, at::ones({4})));
  // The first world's handle is dead: the cache must not have returned it again.
  EXPECT_ANY_THROW(first.expert_data_parallel.all_reduce(t));
  comm::destroy_process_group();
}
