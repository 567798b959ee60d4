// StateOffloader (Engine::offload_states' mechanism): what it moves is what lives on the engine's device, each
// storage once, and every view follows it out and back with its values.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "runtime/offload_states.h"

namespace {

using deepspeed::runtime::StateOffloader;

TEST(StateOffloader, MovesEachStorageOnTheDeviceOnceAndBringsItBack) {
  at::Tensor flat = at::arange(64, at::kFloat);
  at::Tensor view = flat.narrow(0, 8, 16);  // shares flat's storage
  at::Tensor other = at::full({5}, 3.0, at::kDouble);
  const at::Tensor want_flat = flat.clone(), want_other = other.clone();
  const void* before = flat.data_ptr();
  StateOffloader offloader;
  offloader.offload({flat, view, other}, /*pin_memory=*/true, at::Device(at::kCPU));
  EXPECT_TRUE(offloader.offloaded());
  EXPECT_EQ(offloader.offloaded_bytes(), 64 * 4 + 5 * 8) << "the shared storage counted once";
  EXPECT_NE(flat.data_ptr(), before) << "the storage points at its host copy";
  EXPECT_TRUE(at::equal(view, want_flat.narrow(0, 8, 16))) << "the view follows its storage";
  offloader.reload();
  EXPECT_FALSE(offloader.offloaded());
  EXPECT_TRUE(at::equal(flat, want_flat));
  EXPECT_TRUE(at::equal(other, want_other));
  EXPECT_TRUE(at::equal(view, want_flat.narrow(0, 8, 16)));
}

TEST(StateOffloader, StatesAlreadyInHostMemoryStayAsTheyAre) {
  // On an accelerator, offload_optimizer's masters and offload_param's shards are host (pinned) memory already:
  // a round trip through another host copy would only hand them back pageable.
  at::Tensor host_master = at::ones({32}, at::kFloat);
  const void* before = host_master.data_ptr();
  StateOffloader offloader;
  offloader.offload({host_master}, /*pin_memory=*/true, at::Device(at::kCUDA, 0));
  EXPECT_FALSE(offloader.offloaded());
  EXPECT_EQ(offloader.offloaded_bytes(), 0);
  EXPECT_EQ(host_master.data_ptr(), before);
  offloader.reload();
  EXPECT_EQ(host_master.data_ptr(), before);
}

}  // namespace
