// Each counted ATen operator alone: the flops profiler's FLOPs and MACs equal a count by hand with
// DeepSpeed's formula for it, nested operators (aten::linear -> aten::addmm, aten::einsum ->
// aten::bmm) are counted once, and backward is not counted.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <functional>
#include <memory>

#include "deepspeed/error.h"
#include "deepspeed/profiling/flops_profiler.h"

namespace {

namespace dsp = deepspeed::profiling;

struct Counted {
  int64_t flops;
  int64_t macs;
};

// What the profiler counts while `run` runs, with `root` as the model (an empty module when the ops
// use none).
Counted count(const std::function<void()>& run,
              std::shared_ptr<torch::nn::Module> root = std::make_shared<torch::nn::Module>()) {
  dsp::FlopsProfiler prof(root);
  prof.start_profile();
  run();
  prof.stop_profile();
  Counted c{prof.get_total_flops(), prof.get_total_macs()};
  prof.end_profile();
  return c;
}

void expect_count(const Counted& got, int64_t flops, int64_t macs) {
  EXPECT_EQ(got.flops, flops);
  EXPECT_EQ(got.macs, macs);
}

TEST(OpFlops, LinearModuleOn2dInputIsAddmm) {
  torch::nn::Linear lin(torch::nn::LinearOptions(8, 4));
  at::Tensor x = at::randn({5, 8});
  // addmm: MACs = 5 x 8 x 4; flops = 2 x MACs + the bias as given (4 elements, DeepSpeed's addmm
  // formula).
  expect_count(count([&] { lin->forward(x); }, lin.ptr()), 2 * 160 + 4, 160);
}

TEST(OpFlops, LinearModuleOn3dInputIsMatmulPlusBiasAdd) {
  torch::nn::Linear lin(torch::nn::LinearOptions(8, 4));
  at::Tensor x = at::randn({2, 5, 8});
  // matmul: MACs = 2 x 5 x 8 x 4 = 320; bias add_: one flop per output element (2 x 5 x 4).
  expect_count(count([&] { lin->forward(x); }, lin.ptr()), 640 + 40, 320);
  torch::nn::Linear no_bias(torch::nn::LinearOptions(8, 4).bias(false));
  expect_count(count([&] { no_bias->forward(x); }, no_bias.ptr()), 640, 320);
}

// aten::linear runs aten::addmm (2-d) or aten::matmul + aten::add_ (3-d) inside: counted once, with
// DeepSpeed's linear formula (2 x input numel x out_features, bias left out).
TEST(OpFlops, AtenLinearCountsItsNestedOpsOnce) {
  at::Tensor w = at::randn({4, 8}), b = at::randn({4});
  expect_count(count([&] { at::linear(at::randn({5, 8}), w, b); }), 2 * 160, 160);
  expect_count(count([&] { at::linear(at::randn({5, 8}), w); }), 2 * 160, 160);
  expect_count(count([&] { at::linear(at::randn({2, 5, 8}), w, b); }), 2 * 320, 320);
  expect_count(count([&] { at::linear(at::randn({2, 5, 8}), w); }), 2 * 320, 320);
}

TEST(OpFlops, Matmul) {
  // [2,3,4,5] @ [2,3,5,6]: 2 x 3 x 4 x 5 x 6 MACs (DeepSpeed: numel(a) x b.shape[-1]); runs bmm
  // inside.
  expect_count(count([] {
                 at::matmul(at::randn({2, 3, 4, 5}), at::randn({2, 3, 5, 6}));
               }),
               1440, 720);
  // A broadcast batch on the right: [4,5] @ [3,5,6] is 3 products of 4 x 5 x 6.
  expect_count(count([] { at::matmul(at::randn({4, 5}), at::randn({3, 5, 6})); }), 720, 360);
  // Vector @ matrix: 5 x 6.
  expect_count(count([] { at::matmul(at::randn({5}), at::randn({5, 6})); }), 60, 30);
  expect_count(count([] { at::mm(at::randn({3, 4}), at::randn({4, 5})); }), 120, 60);
}

TEST(OpFlops, BmmAndBaddbmm) {
  expect_count(count([] { at::bmm(at::randn({2, 3, 4}), at::randn({2, 4, 5})); }), 240, 120);
  // baddbmm adds its [2,3,5] input: + 30 flops.
  expect_count(count([] {
                 at::baddbmm(at::randn({2, 3, 5}), at::randn({2, 3, 4}), at::randn({2, 4, 5}));
               }),
               240 + 30, 120);
}

TEST(OpFlops, LayerNorm) {
  at::Tensor x = at::randn({2, 3, 8});
  torch::nn::LayerNorm affine(torch::nn::LayerNormOptions({8}));
  expect_count(count([&] { affine->forward(x); }, affine.ptr()), 5 * 48, 0);
  torch::nn::LayerNorm plain(torch::nn::LayerNormOptions({8}).elementwise_affine(false));
  expect_count(count([&] { plain->forward(x); }, plain.ptr()), 4 * 48, 0);
}

TEST(OpFlops, SoftmaxAndActivationsCostOnePerElement) {
  at::Tensor x = at::randn({2, 3, 8});
  expect_count(count([&] { at::softmax(x, -1); }), 48, 0);
  expect_count(count([&] { at::gelu(x, "tanh"); }), 48, 0);
  expect_count(count([&] { at::relu(x); }), 48, 0);
  expect_count(count([&] { at::silu(x); }), 48, 0);
}

TEST(OpFlops, Conv2d) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 5, 3).stride(2).padding(1));
  // Output 5 x 5 per image ((9 + 2 - 3) / 2 + 1); each of the 2 x 25 positions and 5 channels takes
  // 3 x 3 x 3 MACs; the bias adds one flop per output element.
  const int64_t macs = 2 * 25 * 5 * 27;
  expect_count(count(
                   [&] {
                     conv->forward(at::randn({2, 3, 9, 9}));
                   },
                   conv.ptr()),
               2 * macs + 2 * 25 * 5, macs);
}

TEST(OpFlops, ElementwiseCountsTheBroadcastResult) {
  at::Tensor x = at::randn({2, 3, 8}), y = at::randn({8});
  expect_count(count([&] { (void)(x + y); }), 48, 0);
  expect_count(count([&] { (void)(x * 0.5); }), 48, 0);  // mul.Scalar runs mul.Tensor inside: once
  expect_count(count([&] { (void)(x - y); }), 48, 0);
}

TEST(OpFlops, EmbeddingDropoutAndCrossEntropyCostNothing) {
  torch::nn::Embedding emb(10, 8);
  expect_count(count([&] { emb->forward(at::tensor({1, 2, 3}, at::kLong)); }, emb.ptr()), 0, 0);
  // Dropout scales by a mask inside (aten::mul, aten::div_): not counted.
  expect_count(count([] { at::dropout(at::randn({4, 8}), 0.5, true); }), 0, 0);
  expect_count(count([] {
                 at::cross_entropy_loss(at::randn({4, 8}), at::tensor({1, 2, 3, 4}, at::kLong));
               }),
               0, 0);
}

// An operator without a formula does not hide the counted operators it runs.
TEST(OpFlops, EinsumIsCountedThroughItsBmm) {
  expect_count(count([] {
                 at::einsum("bij,bjk->bik", {at::randn({2, 3, 4}), at::randn({2, 4, 5})});
               }),
               240, 120);
}

TEST(OpFlops, BackwardIsNotCounted) {
  torch::nn::Linear lin(torch::nn::LinearOptions(8, 4));
  at::Tensor x = at::randn({5, 8});
  const Counted forward_only = count([&] { lin->forward(x); }, lin.ptr());
  const Counted with_backward = count([&] { lin->forward(x).sum().backward(); }, lin.ptr());
  // sum() has no formula; backward's mm and sum are ignored.
  EXPECT_EQ(with_backward.flops, forward_only.flops);
  EXPECT_EQ(with_backward.macs, forward_only.macs);
}

TEST(OpFlops, NothingIsCountedOutsideStartAndStop) {
  dsp::FlopsProfiler prof(std::make_shared<torch::nn::Module>());
  prof.start_profile();
  at::mm(at::randn({3, 4}), at::randn({4, 5}));
  prof.stop_profile();
  at::mm(at::randn({3, 4}), at::randn({4, 5}));
  EXPECT_EQ(prof.get_total_macs(), 60);
  prof.continue_profile();
  at::mm(at::randn({3, 4}), at::randn({4, 5}));
  prof.stop_profile();
  EXPECT_EQ(prof.get_total_macs(), 120) << "continue_profile keeps what was counted";
  prof.start_profile();
  prof.stop_profile();
  EXPECT_EQ(prof.get_total_macs(), 0) << "start_profile starts from zero";
  prof.end_profile();
  EXPECT_FALSE(prof.started());
}

TEST(OpFlops, OneActiveProfilerPerThread) {
  dsp::FlopsProfiler a(std::make_shared<torch::nn::Module>());
  dsp::FlopsProfiler b(std::make_shared<torch::nn::Module>());
  a.start_profile();
  EXPECT_THROW(b.start_profile(), deepspeed::Error);
  a.end_profile();
  b.start_profile();
  b.end_profile();
}

TEST(OpFlops, HumanReadableNumbersAsDeepSpeedPrintsThem) {
  EXPECT_EQ(dsp::number_to_string(12345), "12.35 K");
  EXPECT_EQ(dsp::number_to_string(0), "0 ");
  EXPECT_EQ(dsp::macs_to_string(2.5e9), "2.5 GMACs");
  EXPECT_EQ(dsp::flops_to_string(3e12), "3 TFLOPS");
  EXPECT_EQ(dsp::params_to_string(1.5e9), "1.5 B");
  EXPECT_EQ(dsp::params_to_string(999), "999");
  EXPECT_EQ(dsp::duration_to_string(0.0034), "3.4 ms");
}

}  // namespace
