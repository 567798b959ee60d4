// fp16 loss scaling across ranks. LibTorch 1.13 has no fp16 matmul on CPU, so the model here uses
// only the elementwise ops it has in fp16 (mul, add, pow, sum, mean); the engine path is the same
// one a GPU model takes.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "elementwise_net.h"
#include "tiny_gpt.h"

namespace {

using elementwise_net::batch_for;
using elementwise_net::ElementwiseNet;


std::string fp16_config(int stage, const std::string& fp16_extra) {
  return "{\"train_micro_batch_size_per_gpu\": 4, \"steps_per_print\": 1000,"
         " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01}},"
         " \"zero_optimization\": {\"stage\": " +
         std::to_string(stage) + (stage == 3 ? ", \"stage3_param_persistence_threshold\": 0" : "") +
         "},"
         " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"hysteresis\": 1" +
         fp16_extra + "}}";
}


std::vector<at::Tensor> params_of(const ElementwiseNet& net) {
  deepspeed::zero::GatheredParameters gathered(*net);  // stage 3: whole parameters
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

TEST(Fp16, OneRanksInfSkipsTheStepEverywhereAndHalvesTheScale) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const int poisoned = deepspeed::comm::get_world_size() - 1;
  for (int stage : {0, 1, 2, 3}) {
    ElementwiseNet net;
    auto engine =
        deepspeed::initialize(net, deepspeed::Config::from_string(fp16_config(stage, "")));
    EXPECT_EQ(params_of(net)[0].scalar_type(), at::kHalf)
        << "fp16 runs the model in half precision";
    EXPECT_EQ(engine.loss_scale(), 256.0);
    for (int step = 0; step < 6; ++step) {
      at::Tensor t;
      at::Tensor x = batch_for(rank, step, &t);
      if (step == 2 && rank == poisoned)
        x[0][5] = 300.0;  // (300 w1)^2 * scale overflows fp16 in backward
      auto before = params_of(net);
      engine.backward(engine.forward(x, t));
      engine.step();
      if (step == 2) {
        EXPECT_EQ(engine.skipped_steps(), 1) << "stage " << stage;
        EXPECT_EQ(engine.loss_scale(), 128.0) << "stage " << stage;
        EXPECT_TRUE(same(before, params_of(net)))
            << "stage " << stage << ": a skipped step must not move anything";
      } else {
        EXPECT_FALSE(same(before, params_of(net)))
            << "stage " << stage << " step " << step << " should train";
      }
    }
    EXPECT_EQ(engine.skipped_steps(), 1);
    EXPECT_EQ(engine.global_steps(), 6);
    // All ranks hold the same parameters after recovering.
    auto world = deepspeed::comm::get_world_group();
    for (auto& p : params_of(net)) {
      at::Tensor root = p.clone();
      world.broadcast(root, 0);
      EXPECT_TRUE(at::equal(root, p)) << "stage " << stage;
    }
  }
}

TEST(Fp16, OverflowAtMinimumScaleNamesTheParameter) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  for (int stage : {2, 3}) {
    ElementwiseNet net;
    auto engine = deepspeed::initialize(
        net, deepspeed::Config::from_string(fp16_config(stage, ", \"min_loss_scale\": 256")));
    at::Tensor t;
    at::Tensor x = batch_for(rank, 0, &t);
    x[0][3] = 300.0;
    engine.backward(engine.forward(x, t));
    try {
      engine.step();
      FAIL() << "an overflow at min_loss_scale must be an error";
    } catch (const deepspeed::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("min_loss_scale"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'w1'"), std::string::npos)
          << "the first overflowing parameter is named: " << msg;
    }
  }
}

TEST(Fp16, StaticScaleNeverChanges) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  ElementwiseNet net;
  auto engine = deepspeed::initialize(
      net, deepspeed::Config::from_string(fp16_config(1, ", \"loss_scale\": 64")));
  for (int step = 0; step < 3; ++step) {
    at::Tensor t;
    at::Tensor x = batch_for(rank, step, &t);
    engine.backward(engine.forward(x, t));
    engine.step();
  }
  EXPECT_EQ(engine.loss_scale(), 64.0);
  EXPECT_EQ(engine.skipped_steps(), 0);
}

}  // namespace
