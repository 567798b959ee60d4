// GradReducer across real ranks: bucketed averages equal the mean of every rank's gradients, buckets start from
// the hooks while backward runs (overlap_comm), unused parameters do not hang the reduction, and non-boundary
// passes leave the local gradients alone.
#include "zero/grad_reducer.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "deepspeed/comm.h"
#include "tolerance.h"

namespace deepspeed::zero {
namespace {

struct Net {
  std::vector<torch::nn::Linear> layers;
  torch::nn::Linear unused{nullptr};
  std::vector<FlatGroup> groups;

  explicit Net(bool with_unused) {
    at::manual_seed(3);
    for (int i = 0; i < 4; ++i) layers.push_back(torch::nn::Linear(8, 8));
    if (with_unused) unused = torch::nn::Linear(8, 8);
    groups.resize(1);
    for (auto& l : layers)
      for (auto& p : l->parameters()) groups[0].params.push_back(p);
    if (with_unused)
      for (auto& p : unused->parameters()) groups[0].params.push_back(p);
    flatten_into(groups);
  }

  at::Tensor loss(int rank) {
    at::Tensor x = at::arange(16, at::kFloat).view({2, 8}).mul(0.1 * (rank + 1));
    for (auto& l : layers) x = at::tanh(l->forward(x));
    return x.pow(2).sum();
  }
};

void init_comm() {
  if (!comm::is_initialized()) comm::init_distributed();
}

// The mean over all ranks of the gradients each rank computes locally (recomputed here for every rank). The
// reducer sums the same `world` terms in another order; rank r's input is scaled by r + 1, so the terms differ by
// up to `world` times in size: world * world terms' worth of float rounding, relative to the largest gradient.
double average_bound() {
  const int64_t n = comm::get_world_size();
  return tolerance::reordered(tolerance::kFp32Epsilon, n * n, 1);
}

at::Tensor expected_average(bool with_unused) {
  int world = comm::get_world_size();
  at::Tensor sum;
  for (int r = 0; r < world; ++r) {
    Net net(with_unused);
    net.loss(r).backward();
    sum = sum.defined() ? sum + net.groups[0].grads_flat : net.groups[0].grads_flat.clone();
  }
  return sum / world;
}

// Stage 2's buckets sized from the model: DeepSpeed's default (5e8 elements) is cut to this rank's share of the
// gradients over the four live staging buffers; a smaller configured size is kept; a tiny model's buckets stop at the
// floor (64 Ki elements), and a large world's at a sixteenth of the gradient over the buffers, rather than
// multiplying collectives.
TEST(GradReducer, StageTwoBucketsAreSizedFromTheModel) {
  using deepspeed::zero::GradReducer;
  EXPECT_EQ(GradReducer::sized_bucket_elems(500000000, 25165824, 2), 25165824 / 2 / 4);
  EXPECT_EQ(GradReducer::sized_bucket_elems(500000000, 25165824, 4), 25165824 / 4 / 4);
  EXPECT_EQ(GradReducer::sized_bucket_elems(500000, 25165824, 2), 500000);
  EXPECT_EQ(GradReducer::sized_bucket_elems(500000000, 1000, 2), 65536);
  EXPECT_EQ(GradReducer::sized_bucket_elems(1000, 1000, 2), 1000);
  EXPECT_EQ(GradReducer::sized_bucket_elems(500000000, 25165825, 3), (25165825 + 2) / 3 / 4);
  // A 7B model on 512 ranks: a sixteenth of the gradient over the four buffers, not a 512th.
  EXPECT_EQ(GradReducer::sized_bucket_elems(500000000, 7000000000, 512), 7000000000 / 64);
}

TEST(GradReducer, OverlappedBucketsAverageAcrossRanks) {
  init_comm();
  auto world = comm::get_world_group();
  Net net(false);
  GradReducerOptions options;
  options.bucket_elems = 60;  // one bucket per layer: 4 buckets
  options.overlap_comm = true;
  GradReducer reducer(net.groups, world, options);
  ASSERT_GE(reducer.num_buckets(), 3u);
  reducer.begin_backward(true);
  net.loss(world.rank()).backward();
  if (world.size() > 1) {
    EXPECT_EQ(reducer.buckets_launched_during_backward(), reducer.num_buckets());
  }
  const double blocked_in_hooks = reducer.blocked_ms();
  reducer.finish_backward();
  EXPECT_WITHIN(tolerance::relative_max_error(net.groups[0].grads_flat, expected_average(false)), average_bound());
  // The breakdown's "reduce (blocked)": counted in the hooks that launched the buckets and in finish_backward.
  if (world.size() > 1) {
    EXPECT_GT(blocked_in_hooks, 0.0);
    EXPECT_GT(reducer.blocked_ms(), blocked_in_hooks);
  } else {
    EXPECT_EQ(reducer.blocked_ms(), 0.0) << "one fp32 rank has nothing to reduce";
  }
}

TEST(GradReducer, WithoutOverlapNothingStartsDuringBackward) {
  init_comm();
  auto world = comm::get_world_group();
  Net net(false);
  GradReducerOptions options;
  options.bucket_elems = 50;
  options.overlap_comm = false;
  GradReducer reducer(net.groups, world, options);
  reducer.begin_backward(true);
  net.loss(world.rank()).backward();
  EXPECT_EQ(reducer.buckets_launched_during_backward(), 0u);
  reducer.finish_backward();
  EXPECT_WITHIN(tolerance::relative_max_error(net.groups[0].grads_flat, expected_average(false)), average_bound());
}

TEST(GradReducer, UnusedParametersDoNotHang) {
  init_comm();
  auto world = comm::get_world_group();
  Net net(true);
  GradReducerOptions options;
  options.bucket_elems = 60;
  GradReducer reducer(net.groups, world, options);
  reducer.begin_backward(true);
  net.loss(world.rank()).backward();
  reducer.finish_backward();
  EXPECT_WITHIN(tolerance::relative_max_error(net.groups[0].grads_flat, expected_average(true)), average_bound());
  EXPECT_EQ(net.unused->weight.grad().abs().sum().item<float>(), 0.0f);
}

TEST(GradReducer, NonBoundaryPassKeepsLocalGradients) {
  init_comm();
  auto world = comm::get_world_group();
  Net net(false);
  GradReducer reducer(net.groups, world, GradReducerOptions{});
  reducer.begin_backward(false);
  net.loss(world.rank()).backward();
  reducer.finish_backward();
  Net local(false);
  local.loss(world.rank()).backward();
  EXPECT_TRUE(at::equal(net.groups[0].grads_flat, local.groups[0].grads_flat));
}

TEST(GradReducer, PrescaleAndPredivideGiveTheSameAverage) {
  init_comm();
  auto world = comm::get_world_group();
  for (bool prescale : {false, true}) {
    Net net(false);
    GradReducerOptions options;
    options.prescale_gradients = prescale;
    options.gradient_predivide_factor = 2.0;
    GradReducer reducer(net.groups, world, options);
    reducer.begin_backward(true);
    net.loss(world.rank()).backward();
    reducer.finish_backward();
    EXPECT_WITHIN(tolerance::relative_max_error(net.groups[0].grads_flat, expected_average(false)), average_bound())
        << "prescale " << prescale;
  }
}

}  // namespace
}  // namespace deepspeed::zero
