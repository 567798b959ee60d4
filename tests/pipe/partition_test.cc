// Layer partitioning (deepspeed/pipe/module.h): partition_uniform, partition_balanced and every
// partition_method of partition_layers, on cases small enough to check by hand, and their errors.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "deepspeed/pipe/module.h"

namespace {

using deepspeed::Error;
using deepspeed::pipe::LayerSpec;
using deepspeed::pipe::Partition;
using deepspeed::pipe::partition_balanced;
using deepspeed::pipe::partition_layers;
using deepspeed::pipe::partition_uniform;
using deepspeed::pipe::TiedLayerSpec;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

LayerSpec linear(int64_t in, int64_t out, std::string type = "Linear") {
  return LayerSpec::of<torch::nn::Linear>(std::move(type), in, out);
}

LayerSpec identity(std::string type) {
  return LayerSpec::function(std::move(type), [](const at::Tensor& x) { return x; });
}

// Types: Embed, Block x4, Norm, Head (one-parameter modules; only the type names matter here).
std::vector<LayerSpec> typed_layers() {
  std::vector<LayerSpec> layers{linear(1, 1, "Embed")};
  for (int i = 0; i < 4; ++i) layers.push_back(linear(1, 1, "TransformerBlock"));
  layers.push_back(linear(1, 1, "Norm"));
  layers.push_back(linear(1, 1, "Head"));
  return layers;
}

TEST(PartitionUniform, LargerPartsFirst) {
  EXPECT_EQ(partition_uniform(10, 3), (Partition{0, 4, 7, 10}));
  EXPECT_EQ(partition_uniform(9, 3), (Partition{0, 3, 6, 9}));
  EXPECT_EQ(partition_uniform(5, 1), (Partition{0, 5}));
  EXPECT_EQ(partition_uniform(4, 4), (Partition{0, 1, 2, 3, 4}));
}

TEST(PartitionBalanced, MinimisesTheHeaviestPart) {
  // One heavy item alone in its part; the light items before it together.
  EXPECT_EQ(partition_balanced({1, 1, 1, 1, 10, 1}, 3), (Partition{0, 4, 5, 6}));
  // 14 in all: 5+1+1 | 7 x 1.
  EXPECT_EQ(partition_balanced({5, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 2), (Partition{0, 3, 10}));
  // Heavy at the end: 8 | 8 | 8 with the light ones in front.
  EXPECT_EQ(partition_balanced({2, 2, 2, 2, 4, 4, 8}, 3), (Partition{0, 4, 6, 7}));
  // Equal weights: the heaviest part is 4 as with partition_uniform, but the earlier parts take all the optimum
  // allows (uniform gives 0,4,7,10).
  EXPECT_EQ(partition_balanced(std::vector<double>(10, 1.0), 3), (Partition{0, 4, 8, 10}));
}

TEST(PartitionBalanced, EveryPartNonEmptyAndDeterministicTies) {
  // All weight zero: any split is optimal; the earlier parts take as much as leaves one item per
  // later part.
  EXPECT_EQ(partition_balanced({0, 0, 0, 0}, 2), (Partition{0, 3, 4}));
  // Everything in the first item: it alone is the heaviest part; the rest still get one item each.
  EXPECT_EQ(partition_balanced({9, 0, 0, 0, 0}, 3), (Partition{0, 3, 4, 5}));
  EXPECT_EQ(partition_balanced({3, 3}, 2), (Partition{0, 1, 2}));
  for (const Partition& p :
       {partition_balanced({0, 5, 0, 0, 5, 0, 0}, 4), partition_balanced({1, 0, 0, 0}, 4)})
    for (size_t s = 0; s + 1 < p.size(); ++s) EXPECT_LT(p[s], p[s + 1]);
}

TEST(PartitionLayers, Uniform) {
  std::vector<LayerSpec> layers;
  for (int i = 0; i < 10; ++i) layers.push_back(identity("Fn"));
  EXPECT_EQ(partition_layers(layers, 3, "uniform"), (Partition{0, 4, 7, 10}));
  EXPECT_EQ(partition_layers(layers, 3, "Uniform"), (Partition{0, 4, 7, 10}));
}

TEST(PartitionLayers, TypeRegexIsCaseInsensitiveSearch) {
  // Blocks at 1-4: two per stage; the non-matching layers weigh nothing and go with the earlier
  // part.
  EXPECT_EQ(partition_layers(typed_layers(), 2, "type:block"), (Partition{0, 3, 7}));
  EXPECT_EQ(partition_layers(typed_layers(), 2, "type:BLOCK"), (Partition{0, 3, 7}));
  EXPECT_EQ(partition_layers(typed_layers(), 4, "type:^transformer"), (Partition{0, 2, 3, 4, 7}));
  // Embed and Head: one each.
  EXPECT_EQ(partition_layers(typed_layers(), 2, "type:embed|head"), (Partition{0, 6, 7}));
}

TEST(PartitionLayers, Explicit) {
  EXPECT_EQ(partition_layers(typed_layers(), 2, "0,3,7"), (Partition{0, 3, 7}));
  EXPECT_EQ(partition_layers(typed_layers(), 3, "0,1,6,7"), (Partition{0, 1, 6, 7}));
}

TEST(PartitionLayers, ParametersCountsModulesAndTiedOnce) {
  auto tied = [] { return torch::nn::AnyModule(torch::nn::Linear(8, 8)); };  // 72 parameters
  std::vector<LayerSpec> layers{
      TiedLayerSpec("embed", "Linear", tied), linear(2, 2),    linear(2, 2), linear(2, 2),
      TiedLayerSpec("embed", "Linear", tied), identity("Relu")};
  // Weights 72, 6, 6, 6, 0 (the key's second occurrence), 0 (a function): 72 | 18. Counting the
  // second occurrence too would give 90 | 72 (0,4,6).
  EXPECT_EQ(partition_layers(layers, 2, "parameters"), (Partition{0, 1, 6}));
  // Balances parameter counts, not layer counts: 6+6+6 | 60.
  std::vector<LayerSpec> skewed{linear(2, 2), linear(2, 2), linear(2, 2), linear(5, 10)};
  EXPECT_EQ(partition_layers(skewed, 2, "parameters"), (Partition{0, 3, 4}));
  EXPECT_EQ(partition_layers(skewed, 2, "uniform"), (Partition{0, 2, 4}));
}

TEST(PartitionLayers, ParametersLeavesTheGeneratorAsItFoundIt) {
  std::vector<LayerSpec> layers{linear(4, 4), linear(4, 4)};
  at::manual_seed(7);
  const at::Tensor expected = at::rand({4});
  at::manual_seed(7);
  partition_layers(layers, 2, "parameters");
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

TEST(PartitionLayers, Errors) {
  std::vector<LayerSpec> three{identity("A"), identity("B"), identity("C")};
  EXPECT_THAT([&] { partition_layers(three, 4, "uniform"); },
              ThrowsMessage<Error>(HasSubstr("pipeline: 3 layers cannot fill 4 stages")));
  EXPECT_THAT([&] { partition_layers(three, 2, "bogus"); },
              ThrowsMessage<Error>(HasSubstr("unknown partition_method \"bogus\"")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 2, "type:Conv"); },
              ThrowsMessage<Error>(HasSubstr("\"type:Conv\" matches no layer type")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 2, "type:("); },
              ThrowsMessage<Error>(HasSubstr("\"type:(\": bad regex")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 2, "0,3"); },
              ThrowsMessage<Error>(HasSubstr("gives 2 boundaries; 2 stages need 3")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 2, "1,3,7"); },
              ThrowsMessage<Error>(HasSubstr("must start at 0 and end at the layer count 7")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 2, "0,3,6"); },
              ThrowsMessage<Error>(HasSubstr("must start at 0 and end at the layer count 7")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 3, "0,5,3,7"); },
              ThrowsMessage<Error>(HasSubstr("\"0,5,3,7\" is not strictly ascending (5 then 3)")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 3, "0,3,3,7"); },
              ThrowsMessage<Error>(HasSubstr("not strictly ascending (3 then 3)")));
  EXPECT_THAT([&] { partition_layers(typed_layers(), 2, "0,x,7"); },
              ThrowsMessage<Error>(HasSubstr("'x' is not a layer index")));
  EXPECT_THAT([&] { partition_uniform(4, 0); },
              ThrowsMessage<Error>(HasSubstr("num_parts must be >= 1, got 0")));
  EXPECT_THAT(
      [&] {
        partition_balanced({1, -2}, 1);
      },
      ThrowsMessage<Error>(HasSubstr("weight 1 is negative")));
}

}  // namespace
