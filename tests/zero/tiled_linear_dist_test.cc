// TiledLinear across real ranks: a small model of TiledLinear layers trained 5 Adam steps at ZeRO
// stage 3 (every tile its own unit) ends with stage 0's parameters, built plainly or inside
// zero::Init; with stage3_max_live_parameters set to one tile, the engine never holds two of the
// big layer's tiles (let alone the whole layer) gathered at once; copy_params_from / copy_params_to
// move a whole Linear in and out at stage 3.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "deepspeed/zero/tiled_linear.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace {

using deepspeed::zero::TiledLinear;
using deepspeed::zero::TiledLinearOptions;

// small: 6 -> 40 through forward(); big: 40 -> 36 in 3 x 2 tiles (14/13/13 inputs, 18/18 outputs)
// left split; mix: 36 -> 7 taking the split input, uneven output splits, no bias; head: the root
// unit.
struct TiledNetImpl : torch::nn::Module {
  TiledNetImpl() {
    small =
        register_module("small", TiledLinear(TiledLinearOptions(6, 40).in_splits(2).out_splits(3)));
    big = register_module(
        "big", TiledLinear(TiledLinearOptions(40, 36).in_splits(3).out_splits(2).combine_out_splits(
                   false)));
    mix = register_module(
        "mix",
        TiledLinear(
            TiledLinearOptions(36, 7).bias(false).in_splits(2).out_splits(3).input_is_already_split(
                true)));
    head = register_module("head", torch::nn::Linear(7, 1));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& y) {
    std::vector<at::Tensor> h = big->forward_split({at::tanh(small->forward(x))});
    for (auto& part : h) part = at::tanh(part);
    at::Tensor z = mix->forward_split(h)[0];
    return at::mse_loss(head->forward(at::tanh(z)), y);
  }
  TiledLinear small{nullptr}, big{nullptr}, mix{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(TiledNet);

constexpr int64_t kBigLayer = 40 * 36 + 36;
constexpr int64_t kBigLargestTile = 18 * 14, kBigSmallestTile = 18 * 13;

std::string config_json(int stage, const std::string& zero_extra = "") {
  return "{\"train_micro_batch_size_per_gpu\": 4, \"steps_per_print\": 1000,"
         " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},"
         " \"zero_optimization\": {\"stage\": " +
         std::to_string(stage) + ", \"stage3_param_persistence_threshold\": 0" + zero_extra + "}}";
}

TiledNet build(bool under_init, const deepspeed::Config& cfg) {
  tiny_gpt::ensure_comm();
  at::manual_seed(3);
  deepspeed::zero::Init init(under_init && cfg.zero.stage == 3);
  return TiledNet();
}

std::vector<at::Tensor> full_parameters(const TiledNet& net) {
  deepspeed::zero::GatheredParameters gathered(*net);
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

void train(deepspeed::Engine& engine, int steps) {
  for (int step = 0; step < steps; ++step) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * step + engine.global_rank());
    at::Tensor x = at::randn({4, 6}, gen), y = at::randn({4, 1}, gen);
    engine.backward(engine.forward(x, y));
    engine.step();
  }
}

std::vector<at::Tensor> train_stage(int stage, bool under_init,
                                    deepspeed::zero::Stage3Stats* stats = nullptr,
                                    const std::string& zero_extra = "") {
  auto cfg = deepspeed::Config::from_string(config_json(stage, zero_extra));
  TiledNet net = build(under_init, cfg);
  auto engine = deepspeed::initialize(net, cfg);
  EXPECT_EQ(engine.zero_optimization_stage(), stage);
  train(engine, 5);
  if (stats) *stats = engine.stage3_stats();
  return full_parameters(net);
}

// Adam over 5 steps, stage 3 against stage 0: the tiles' gradients are reduce-scattered (other sums, other
// orders), and Adam turns those roundings in near-zero gradients into full-size updates: measured at both SIMD
// levels (tests/common/tolerance.h). A tile gathered from the wrong partition is off by the training's movement.
const double kAdamStage3 = tolerance::measured(4.9e-8, 4.3e-8);

TEST(TiledLinearStage3, TrainsLikeStageZero) {
  auto cfg0 = deepspeed::Config::from_string(config_json(0));
  auto initial = full_parameters(build(false, cfg0));
  auto reference = train_stage(0, false);
  ASSERT_GT(tiny_gpt::max_relative_error(reference, initial), 1e-3)
      << "training must move the parameters";
  EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(3, false), reference), tiny_gpt::bound_at_this_world(kAdamStage3)) << "stage 3 vs stage 0";
}

TEST(TiledLinearStage3, BuiltUnderInitTrainsLikeStageZero) {
  auto cfg3 = deepspeed::Config::from_string(config_json(3));
  {
    TiledNet net = build(true, cfg3);
    // Every tile is partitioned as it is built: at rest no tile parameter holds its values whole on
    // this rank.
    for (const auto& item : net->named_parameters()) {
      if (item.key().rfind("head.", 0) != 0) {
        EXPECT_EQ(item.value().numel(), 0) << item.key();
      }
    }
  }
  auto reference = train_stage(0, false);
  EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(3, true), reference), tiny_gpt::bound_at_this_world(kAdamStage3))
      << "stage 3 under zero::Init vs stage 0";
}

TEST(TiledLinearStage3, TilesAreGatheredOneAtATime) {
  deepspeed::zero::Stage3Stats stats;
  // One tile's worth of live parameters, no reuse: each tile is released before the next is
  // gathered.
  const std::string extra = ", \"stage3_max_live_parameters\": " + std::to_string(kBigLargestTile) +
                            ", \"stage3_max_reuse_distance\": 0";
  auto reference = train_stage(0, false);
  auto got = train_stage(3, false, &stats, extra);
  EXPECT_WITHIN(tiny_gpt::max_relative_error(got, reference), tiny_gpt::bound_at_this_world(kAdamStage3))
      << "the live bound must not change the numbers";
  EXPECT_GE(stats.peak_live_elems, kBigLargestTile)
      << "the big layer's largest tile must have been gathered whole";
  EXPECT_LT(stats.peak_live_elems, kBigLayer) << "the whole big layer was gathered at once";
  EXPECT_LT(stats.peak_live_elems, kBigLargestTile + kBigSmallestTile)
      << "two of the big layer's tiles were live";
  EXPECT_GE(stats.gathers, 5 * 2 * (6 + 6 + 6))
      << "each tile is gathered in forward and again in backward";
}

// Stage 3 (and zero::Init): copy_params_from keeps rank 0's Linear, copy_params_to returns it on
// every rank.
TEST(TiledLinearStage3, CopiesAWholeLinearInAndOut) {
  for (bool under_init : {true, false}) {
    SCOPED_TRACE(under_init ? "zero::Init, no engine" : "engine at stage 3");
    auto cfg = deepspeed::Config::from_string(config_json(3));
    TiledNet net = build(under_init, cfg);
    std::unique_ptr<deepspeed::Engine> engine;
    if (!under_init) engine = std::make_unique<deepspeed::Engine>(deepspeed::initialize(net, cfg));
    const int rank = deepspeed::comm::get_rank();
    at::manual_seed(100);  // rank 0's Linear...
    torch::nn::Linear rank0(40, 36);
    at::manual_seed(100 + rank);  // ...and this rank's, different on the others
    torch::nn::Linear mine(40, 36);
    net->big->copy_params_from(*mine);
    torch::nn::Linear back(40, 36);
    net->big->copy_params_to(*back);
    EXPECT_TRUE(at::equal(back->weight, rank0->weight)) << "rank 0's weight must win";
    EXPECT_TRUE(at::equal(back->bias, rank0->bias)) << "rank 0's bias must win";
    if (engine) {
      // The copy reached the partitions the optimizer steps: training continues from it like stage
      // 0 would.
      auto ref_cfg = deepspeed::Config::from_string(config_json(0));
      TiledNet ref_net = build(false, ref_cfg);
      ref_net->big->copy_params_from(*rank0);
      auto ref_engine = deepspeed::initialize(ref_net, ref_cfg);
      train(ref_engine, 2);
      train(*engine, 2);
      EXPECT_WITHIN(tiny_gpt::max_relative_error(full_parameters(net), full_parameters(ref_net)), tiny_gpt::bound_at_this_world(kAdamStage3));
    }
  }
}

}  // namespace
