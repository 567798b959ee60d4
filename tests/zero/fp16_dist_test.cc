// fp16 loss scaling across ranks. LibTorch 1.13 has no fp16 matmul on CPU, so the model here uses
// only the elementwise ops it has in fp16 (mul, add, pow, sum, mean); the engine path is the same
// one a GPU model takes.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "elementwise_net.h"
#include "tiny_gpt.h"
#include "tolerance.h"

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
  // In host memory: the tests compare them with references built there, whichever device the engine trains on.
  for (const auto& p : net->parameters()) out.push_back(p.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
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
      engine.backward(engine.forward(x.to(engine.device()), t.to(engine.device())));
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
    engine.backward(engine.forward(x.to(engine.device()), t.to(engine.device())));
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

// fp16 training against fp32 training of the same model on the same batches, at every stage: the loss is scaled
// by 2^8 before backward and the gradients unscaled before the step, so a wrong unscale factor (the scale applied
// twice or not at all, or divided by the world size twice) moves the weights by a multiple of fp32's movement.
// The bound: the fp16 weights are the fp32 masters rounded once (half an fp16 epsilon), and the fp16 forward and
// backward round each of their ~8 elementwise steps (the gradient is a few fp16 epsilons off), which reaches the
// weights in proportion to their movement (kept below the weights' size here): 4 fp16 epsilons in all. The
// movement is asserted to be 10x that, so the bound cannot hide a scale error.
TEST(Fp16, TrainsLikeFp32AtEveryStage) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const double bound = tolerance::reordered(tolerance::kFp16Epsilon, 4, 1);
  const std::string sgd = R"({"type": "SGD", "params": {"lr": 0.05}})";
  auto train = [&](const std::string& json, bool half) {
    ElementwiseNet net;
    auto engine = deepspeed::initialize(net, deepspeed::Config::from_string(json));
    for (int step = 0; step < 5; ++step) {
      at::Tensor t;
      at::Tensor x = batch_for(rank, step, &t);
      if (!half) {
        x = x.to(at::kFloat);
        t = t.to(at::kFloat);
      }
      engine.backward(engine.forward(x.to(engine.device()), t.to(engine.device())));
      engine.step();
    }
    EXPECT_EQ(engine.skipped_steps(), 0);
    std::vector<at::Tensor> out;
    for (const auto& p : params_of(net)) out.push_back(p.to(at::kFloat));
    return out;
  };
  const auto fp32 = train(R"({"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000, "optimizer": )" + sgd +
                              "}",
                          false);
  std::vector<at::Tensor> initial;
  for (const auto& p : ElementwiseNet()->parameters()) initial.push_back(p.detach().clone());
  ASSERT_GT(tiny_gpt::max_relative_error(fp32, initial), 10 * bound) << "the movement must dwarf the bound";
  for (int stage : {0, 1, 2, 3}) {
    std::string json = fp16_config(stage, "");
    const std::string fp16_sgd = R"({"type": "SGD", "params": {"lr": 0.01}})";
    ASSERT_NE(json.find(fp16_sgd), std::string::npos);
    json.replace(json.find(fp16_sgd), fp16_sgd.size(), sgd);
    EXPECT_WITHIN(tiny_gpt::max_relative_error(train(json, true), fp32), bound) << "stage " << stage;
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
    engine.backward(engine.forward(x.to(engine.device()), t.to(engine.device())));
    engine.step();
  }
  EXPECT_EQ(engine.loss_scale(), 64.0);
  EXPECT_EQ(engine.skipped_steps(), 0);
}

}  // namespace
