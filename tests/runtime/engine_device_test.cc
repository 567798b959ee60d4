// The engine trains on the accelerator's device: initialize moves the model there (Engine::device() says where),
// the optimizer's state and the stage's buffers follow, and a step runs on inputs moved there. On CPU this is the
// host; the GPU check runs the same test on a GPU (tests/gpu), where a buffer left in host memory fails the step.
// Also: an offload to NVMe, which does not run on a GPU yet, is refused by name there.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"

namespace {

std::shared_ptr<torch::nn::LinearImpl> model() {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  at::manual_seed(3);
  return std::make_shared<torch::nn::LinearImpl>(16, 4);
}

TEST(EngineDevice, ModelAndStepsLiveOnTheAcceleratorsDevice) {
  const c10::Device device = deepspeed::accelerator::get_accelerator().device();
  for (int stage : {0, 1, 2, 3}) {
    for (const char* precision : {"", ", \"bf16\": {\"enabled\": true}"}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + precision);
      auto net = model();
      const at::Tensor before = net->weight.detach().to(at::kCPU, at::kFloat, false, true);
      auto engine = deepspeed::initialize(
          net, deepspeed::Config::from_string(
                   std::string(R"({"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW",
                       "params": {"lr": 0.01}}, "zero_optimization": {"stage": )") +
                   std::to_string(stage) + "}" + precision + "}"));
      EXPECT_EQ(engine.device(), device);
      for (const auto& p : engine.parameters()) EXPECT_EQ(p.device(), device);
      at::Tensor x = at::randn({4, 16}).to(engine.device(), net->weight.scalar_type());  // the model's dtype
      at::Tensor loss = engine.forward(x).pow(2).mean();
      EXPECT_EQ(loss.device(), device);
      engine.backward(loss);
      engine.step();
      deepspeed::zero::GatheredParameters full(*net);
      const at::Tensor after = net->weight.detach().to(at::kCPU, at::kFloat, false, true);
      EXPECT_GT((after - before).abs().max().item<double>(), 1e-4) << "the step moved the weights";
    }
  }
}

// Forward, backward and step driven from a thread that did not initialize anything (its current device is the
// default, not the one init_distributed bound) with a side stream current: every stream, event and fence the step
// uses follows the tensors' device and the caller's stream, so the result is the training thread's bit for bit, at
// every stage, with optimizer offload's early copies down at stages 2 and 3.
TEST(EngineDevice, StepsFromAFreshThreadMatchTheTrainingThread) {
  for (int stage : {0, 2, 3}) {
    for (const char* offload : {"", ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}"}) {
      if (stage == 0 && *offload) continue;
      SCOPED_TRACE("stage " + std::to_string(stage) + offload);
      const std::string json = std::string(R"({"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW",
          "params": {"lr": 0.01}}, "zero_optimization": {"stage": )") + std::to_string(stage) + offload + "}}";
      auto train = [&](bool fresh_thread) {
        auto net = model();
        auto engine = deepspeed::initialize(net, deepspeed::Config::from_string(json));
        auto steps = [&] {
          at::manual_seed(11);
          for (int i = 0; i < 3; ++i) {
            at::Tensor x = at::randn({4, 16}).to(engine.device());
            engine.backward(engine.forward(x).pow(2).mean());
            engine.step();
          }
        };
        if (fresh_thread) {
          std::exception_ptr error;
          std::thread t([&] {
            try {
              // And a side stream current, as a caller's pool stream would be.
              auto& acc = deepspeed::accelerator::get_accelerator();
              const std::unique_ptr<deepspeed::accelerator::Stream> side = acc.new_stream();
              deepspeed::accelerator::StreamGuard on_side(*side);
              steps();
            } catch (...) {
              error = std::current_exception();
            }
          });
          t.join();
          if (error) std::rethrow_exception(error);
        } else {
          steps();
        }
        deepspeed::zero::GatheredParameters full(*net);
        return net->weight.detach().to(at::kCPU, at::kFloat, false, true);
      };
      const at::Tensor same_thread = train(false), other_thread = train(true);
      EXPECT_TRUE(at::equal(same_thread, other_thread));
    }
  }
}

}  // namespace
