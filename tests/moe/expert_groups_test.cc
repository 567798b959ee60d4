// moe::expert_groups keeps its groups with the world (comm/world_state.h): after destroy_process_group and a new
// init_distributed it must build them again, not hand out handles of the destroyed world.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "comm/world_state.h"
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

// What a world keeps for others ends with it: the same object while the world lives, released by
// destroy_process_group (nothing process-wide holds it), a fresh one in the next world.
TEST(WorldState, LivesAndEndsWithItsWorld) {
  if (comm::is_initialized()) comm::destroy_process_group();
  comm::init_distributed();
  int made = 0;
  auto make = [&made] {
    ++made;
    return std::make_shared<int>(7);
  };
  std::shared_ptr<void> first = comm::world_state("test.key", make);
  EXPECT_EQ(comm::world_state("test.key", make), first);
  EXPECT_EQ(made, 1);
  std::weak_ptr<void> watch = first;
  first.reset();
  EXPECT_FALSE(watch.expired()) << "the world holds it";
  comm::destroy_process_group();
  EXPECT_TRUE(watch.expired()) << "destroy_process_group releases it";
  comm::init_distributed();
  EXPECT_NE(comm::world_state("test.key", make), nullptr);
  EXPECT_EQ(made, 2);
  comm::destroy_process_group();
}
