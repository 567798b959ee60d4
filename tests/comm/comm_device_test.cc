// Every collective on tensors of the accelerator's device, against closed forms: on a CPU box the host (what the
// other comm tests cover at length), in the GPU check CUDA tensors, over NCCL at one rank and over Gloo at two ranks
// sharing the GPU (NCCL refuses two ranks on one device). A group made after init and used first for a barrier is
// there too: NCCL binds it to the rank's device, not to group_rank % device_count.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"

namespace {

namespace comm = deepspeed::comm;

c10::Device device() { return deepspeed::accelerator::get_accelerator().device(); }

// Rank r's tensor of `n` elements: r + 1 + i, as float on the device.
at::Tensor ranked(int r, int64_t n) { return (at::arange(n, at::kFloat) + (r + 1)).to(device()); }

TEST(CommDevice, EveryCollectiveOnTheDevice) {
  comm::ProcessGroup world = comm::get_world_group();
  const int n = world.size(), me = world.rank();
  constexpr int64_t kLen = 6;
  // all_reduce: the sum over ranks of r + 1 + i.
  at::Tensor t = ranked(me, kLen);
  world.all_reduce(t);
  const at::Tensor sum = at::arange(kLen, at::kFloat) * n + n * (n + 1) / 2.0;
  EXPECT_TRUE(at::equal(t.cpu(), sum));
  EXPECT_EQ(t.device(), device());
  // broadcast from the last rank.
  at::Tensor b = ranked(me, kLen);
  world.broadcast(b, n - 1);
  EXPECT_TRUE(at::equal(b.cpu(), ranked(n - 1, kLen).cpu()));
  // reduce to rank 0.
  at::Tensor r = ranked(me, kLen);
  world.reduce(r, 0);
  if (me == 0) {
    EXPECT_TRUE(at::equal(r.cpu(), sum));
  }
  // all_gather_into_tensor: every rank's tensor in rank order.
  at::Tensor gathered = at::empty({n * kLen}, at::TensorOptions().dtype(at::kFloat).device(device()));
  world.all_gather_into_tensor(gathered, ranked(me, kLen));
  for (int k = 0; k < n; ++k) EXPECT_TRUE(at::equal(gathered.cpu().narrow(0, k * kLen, kLen), ranked(k, kLen).cpu()));
  // reduce_scatter_tensor: chunk `me` of the sum of every rank's n chunks.
  at::Tensor chunk = at::empty({kLen}, at::TensorOptions().dtype(at::kFloat).device(device()));
  world.reduce_scatter_tensor(chunk, ranked(me, n * kLen));
  const at::Tensor whole = at::arange(n * kLen, at::kFloat) * n + n * (n + 1) / 2.0;
  EXPECT_TRUE(at::equal(chunk.cpu(), whole.narrow(0, me * kLen, kLen)));
  // all_to_all_single: rank k's chunk j goes to rank j's chunk k.
  at::Tensor out = at::empty({n * kLen}, at::TensorOptions().dtype(at::kFloat).device(device()));
  world.all_to_all_single(out, ranked(me, n * kLen));
  for (int k = 0; k < n; ++k)
    EXPECT_TRUE(at::equal(out.cpu().narrow(0, k * kLen, kLen), ranked(k, n * kLen).cpu().narrow(0, me * kLen, kLen)));
  // bf16 on the wire (the engine's 16-bit reductions): small integers are exact.
  at::Tensor h = at::full({kLen}, me + 1, at::TensorOptions().dtype(at::kBFloat16).device(device()));
  world.all_reduce(h);
  EXPECT_EQ(h.cpu().to(at::kFloat).max().item<float>(), n * (n + 1) / 2.0f);
}

TEST(CommDevice, ANewGroupsFirstOperationIsABarrier) {
  comm::ProcessGroup world = comm::get_world_group();
  std::vector<int> all(world.size());
  for (int r = 0; r < world.size(); ++r) all[r] = r;
  comm::ProcessGroup group = comm::new_group(all);
  group.barrier();
  at::Tensor t = ranked(group.rank(), 4);
  group.all_reduce(t);
  EXPECT_EQ(t.device(), device());
  EXPECT_EQ(t.cpu()[0].item<float>(), group.size() * (group.size() + 1) / 2.0f);
}

TEST(CommDevice, PointToPointRing) {
  comm::ProcessGroup world = comm::get_world_group();
  const int n = world.size(), me = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  at::Tensor got = at::empty({5}, at::TensorOptions().dtype(at::kFloat).device(device()));
  // Even ranks send first, odd ranks receive first: no two blocking sends face each other.
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  if (me % 2 == 0) {
    world.send(ranked(me, 5), next);
    world.recv(got, prev);
  } else {
    world.recv(got, prev);
    world.send(ranked(me, 5), next);
  }
  EXPECT_TRUE(at::equal(got.cpu(), ranked(prev, 5).cpu()));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  comm::init_distributed();
  int rc = RUN_ALL_TESTS();
  comm::barrier();
  comm::destroy_process_group();
  return rc;
}
