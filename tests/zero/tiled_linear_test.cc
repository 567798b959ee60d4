// TiledLinear against torch::nn::Linear in one process (no ZeRO): forward values and input, weight
// and bias gradients for even and uneven split shapes, with and without bias; split and unsplit
// inputs and outputs chained between two layers; parameter names; copies to and from a Linear; and
// the options it rejects.
#include "deepspeed/zero/tiled_linear.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "tolerance.h"

namespace {

using deepspeed::zero::TiledLinear;
using deepspeed::zero::TiledLinearOptions;

struct Shape {
  int64_t in, out, in_splits, out_splits;
  bool bias;
};

std::string describe(const Shape& s) {
  return std::to_string(s.in) + "x" + std::to_string(s.out) + " in_splits " +
         std::to_string(s.in_splits) + " out_splits " + std::to_string(s.out_splits) +
         (s.bias ? " bias" : " no bias");
}

// Tiles split a matmul into partial sums added afterwards: the same dot products (at most 14 terms: the largest
// in, out or token count, plus the bias) in another order, measured against the largest result. The float error
// of a sum scales with the sum of its terms' magnitudes, which for these random inputs exceeds the largest result
// by a data-dependent factor, so the bound is the worst measured at both SIMD levels (tests/common/tolerance.h);
// a tile holding another tile's weights is off by the weights' size.
const double kTileBound = tolerance::measured(2.7e-6, 3.1e-6);

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_WITHIN(tolerance::relative_max_error(got, want), kTileBound) << what;
}

TiledLinearOptions options_of(const Shape& s) {
  return TiledLinearOptions(s.in, s.out)
      .bias(s.bias)
      .in_splits(s.in_splits)
      .out_splits(s.out_splits);
}

// Uneven shapes: 13 = 5 + 4 + 4, 11 = 6 + 5; one feature per tile; all splits on one side.
const std::vector<Shape> kShapes = {
    {8, 6, 1, 1, true},    {8, 6, 2, 3, true}, {8, 6, 2, 3, false}, {13, 11, 3, 2, true},
    {13, 11, 3, 2, false}, {7, 5, 7, 5, true}, {10, 9, 4, 1, true}, {10, 9, 1, 4, false},
};

TEST(TiledLinear, MatchesLinearForwardAndGradients) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    at::manual_seed(11);
    torch::nn::Linear ref(torch::nn::LinearOptions(s.in, s.out).bias(s.bias));
    TiledLinear tiled(options_of(s));
    tiled->copy_params_from(*ref);

    at::Tensor x = at::randn({3, 4, s.in});
    at::Tensor x_ref = x.clone().requires_grad_(true), x_tiled = x.clone().requires_grad_(true);
    at::Tensor y_ref = ref->forward(x_ref), y_tiled = tiled->forward(x_tiled);
    expect_close(y_tiled, y_ref, "forward");

    at::Tensor dy = at::randn(y_ref.sizes());
    y_ref.backward(dy);
    y_tiled.backward(dy);
    expect_close(x_tiled.grad(), x_ref.grad(), "input gradient");
    const auto &ins = tiled->in_parts(), &outs = tiled->out_parts();
    for (int64_t o = 0; o < s.out_splits; ++o) {
      for (int64_t i = 0; i < s.in_splits; ++i) {
        const std::string tile = "tile (" + std::to_string(o) + ", " + std::to_string(i) + ")";
        at::Tensor want = ref->weight.grad()
                              .narrow(0, outs[o], outs[o + 1] - outs[o])
                              .narrow(1, ins[i], ins[i + 1] - ins[i]);
        expect_close(tiled->tile(o, i).weight.grad(), want, tile + " weight gradient");
        const bool has_bias = s.bias && i == s.in_splits - 1;
        ASSERT_EQ(tiled->tile(o, i).bias.defined(), has_bias)
            << tile << ": one bias per output split, last tile";
        if (has_bias)
          expect_close(tiled->tile(o, i).bias.grad(),
                       ref->bias.grad().narrow(0, outs[o], outs[o + 1] - outs[o]),
                       tile + " bias gradient");
      }
    }
  }
}

TEST(TiledLinear, SplitsAreDeepSpeedsPartitionUniform) {
  TiledLinear t(TiledLinearOptions(13, 11).in_splits(3).out_splits(2));
  EXPECT_EQ(t->in_parts(), (std::vector<int64_t>{0, 5, 9, 13}));
  EXPECT_EQ(t->out_parts(), (std::vector<int64_t>{0, 6, 11}));
  EXPECT_EQ(t->tile(1, 2).weight.sizes(), (std::vector<int64_t>{5, 4}));
}

TEST(TiledLinear, ParameterNamesAreDeepSpeeds) {
  TiledLinear t(TiledLinearOptions(6, 4).in_splits(3).out_splits(2));
  std::vector<std::string> names;
  for (const auto& item : t->named_parameters()) names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{"linears.0.0.weight", "linears.0.1.weight",
                                             "linears.0.2.weight", "linears.0.2.bias",
                                             "linears.1.0.weight", "linears.1.1.weight",
                                             "linears.1.2.weight", "linears.1.2.bias"}));
}

// A layer that leaves its output split feeding one that takes its input split, as DeepSpeed chains
// them.
TEST(TiledLinear, SplitOutputsFeedAlreadySplitInputs) {
  at::manual_seed(5);
  torch::nn::Linear ref_a(13, 10), ref_b(torch::nn::LinearOptions(10, 6).bias(false));
  TiledLinear a(TiledLinearOptions(13, 10).in_splits(3).out_splits(4).combine_out_splits(false));
  TiledLinear b(
      TiledLinearOptions(10, 6).bias(false).in_splits(4).out_splits(2).input_is_already_split(
          true));
  a->copy_params_from(*ref_a);
  b->copy_params_from(*ref_b);
  at::Tensor x = at::randn({5, 13});
  std::vector<at::Tensor> h = a->forward_split({x});
  ASSERT_EQ(h.size(), 4u);
  for (size_t k = 0; k < h.size(); ++k)
    expect_close(
        h[k],
        ref_a->forward(x).narrow(1, a->out_parts()[k], a->out_parts()[k + 1] - a->out_parts()[k]),
        "output split " + std::to_string(k));
  std::vector<at::Tensor> y = b->forward_split(h);
  ASSERT_EQ(y.size(), 1u);
  expect_close(y[0], ref_b->forward(ref_a->forward(x)), "chained output");
}

TEST(TiledLinear, CopyParamsToRebuildsTheLinear) {
  at::manual_seed(9);
  TiledLinear tiled(TiledLinearOptions(13, 11).in_splits(3).out_splits(2));
  torch::nn::Linear whole(13, 11);
  tiled->copy_params_to(*whole);
  at::Tensor x = at::randn({4, 13});
  expect_close(whole->forward(x), tiled->forward(x), "Linear rebuilt from the tiles");
  // And back: a fresh TiledLinear from that Linear holds the same tiles bit for bit.
  TiledLinear again(TiledLinearOptions(13, 11).in_splits(3).out_splits(2));
  again->copy_params_from(*whole);
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_TRUE(at::equal(again->tile(o, i).weight, tiled->tile(o, i).weight));
  EXPECT_TRUE(at::equal(again->tile(1, 2).bias, tiled->tile(1, 2).bias));
}

// Expects `fn` to throw deepspeed::Error whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TiledLinear, RejectsBadOptionsAndInputsByName) {
  expect_error([] { TiledLinear(TiledLinearOptions(8, 6).in_splits(0)); },
               "in_splits must be >= 1");
  expect_error([] { TiledLinear(TiledLinearOptions(8, 6).out_splits(7)); },
               "out_splits (7) must be <= out_features");
  expect_error([] { TiledLinear(TiledLinearOptions(0, 6)); }, "in_features must be >= 1");
  TiledLinear split_out(TiledLinearOptions(8, 6).out_splits(2).combine_out_splits(false));
  expect_error([&] { split_out->forward(at::randn({2, 8})); }, "forward_split");
  TiledLinear split_in(TiledLinearOptions(8, 6).in_splits(2).input_is_already_split(true));
  expect_error([&] { split_in->forward_split({at::randn({2, 8})}); }, "expects 2 input tensors");
  expect_error(
      [&] {
        split_in->forward_split({at::randn({2, 4}), at::randn({2, 3})});
      },
      "input split 1");
  TiledLinear plain(TiledLinearOptions(8, 6).in_splits(2));
  expect_error([&] { plain->forward(at::randn({2, 7})); }, "in_features = 8");
  torch::nn::Linear no_bias(torch::nn::LinearOptions(8, 6).bias(false)), wrong(8, 5);
  expect_error([&] { plain->copy_params_from(*no_bias); }, "bias");
  expect_error([&] { plain->copy_params_to(*wrong); }, "[out_features, in_features] = [6, 8]");
}

}  // namespace
