// Engine::offload_states / reload_states at every ZeRO stage: the chosen states leave their memory (the bytes moved
// are the engine's own accounting of them), the engine refuses to run while they are out, and training after a
// reload continues bit for bit as if nothing had happened.
#include <gtest/gtest.h>

#include <string>

#include "deepspeed/accelerator.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "tiny_gpt.h"

namespace {

std::string config_for(int stage) {
  return "{\"train_micro_batch_size_per_gpu\": 2, \"steps_per_print\": 1000,"
         " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.1}},"
         " \"zero_optimization\": {\"stage\": " +
         std::to_string(stage) + (stage == 3 ? ", \"stage3_param_persistence_threshold\": 0" : "") + "}}";
}

std::vector<at::Tensor> full_params(const deepspeed::models::GPT& model) {
  deepspeed::zero::GatheredParameters gathered(*model);
  return tiny_gpt::snapshot(model);
}

TEST(OffloadStates, TrainingAfterReloadIsBitExactAtEveryStage) {
  auto c = tiny_gpt::config();
  c.shard_blocks = true;
  auto data = tiny_gpt::dataset(c);
  for (int stage : {0, 1, 2, 3}) {
    auto cfg = deepspeed::Config::from_string(config_for(stage));
    tiny_gpt::ensure_comm();
    auto ref_model = tiny_gpt::make_model(c);
    auto ref = deepspeed::initialize(ref_model, cfg);
    tiny_gpt::train(ref, data, 2);
    tiny_gpt::train(ref, data, 3);
    auto want = full_params(ref_model);

    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, cfg);
    tiny_gpt::train(engine, data, 2);
    const auto bytes = engine.model_state_bytes();
    engine.offload_states();
    EXPECT_GE(engine.offloaded_state_bytes(), bytes.optimizer_states + bytes.gradients) << "stage " << stage;
    at::Tensor x = data.narrow(0, 0, 2).narrow(1, 0, c.seq_len), y = data.narrow(0, 0, 2).narrow(1, 1, c.seq_len);
    try {
      engine.forward(x, y);
      ADD_FAILURE() << "stage " << stage << ": forward must refuse to run on offloaded states";
    } catch (const deepspeed::Error& e) {
      EXPECT_NE(std::string(e.what()).find("reload_states"), std::string::npos) << e.what();
    }
    engine.reload_states();
    EXPECT_EQ(engine.offloaded_state_bytes(), 0);
    tiny_gpt::train(engine, data, 3);
    auto got = full_params(model);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "stage " << stage << " param " << i;
  }
}

TEST(OffloadStates, IncludeChoosesWhatMoves) {
  tiny_gpt::ensure_comm();
  auto c = tiny_gpt::config();
  for (int stage : {1, 3}) {
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_for(stage)));
    tiny_gpt::train(engine, tiny_gpt::dataset(c), 1);
    deepspeed::OffloadStatesOptions only_optimizer;
    only_optimizer.include = {deepspeed::OffloadStateType::kOptimStates};
    engine.offload_states(only_optimizer);
    EXPECT_EQ(engine.offloaded_state_bytes(), engine.model_state_bytes().optimizer_states) << "stage " << stage;
    EXPECT_THROW(engine.offload_states(), deepspeed::Error) << "offloading twice must be refused";
    engine.reload_states();
    tiny_gpt::train(engine, tiny_gpt::dataset(c), 1);  // trains again
    EXPECT_EQ(engine.global_steps(), 2);
  }
}

// On an accelerator, with the optimizer offloaded to pinned host memory: the masters (host already) do not move and
// stay pinned, the device states do, and training after the round trip continues bit for bit. (On a CPU device every
// state is on the device: the tests above.)
TEST(OffloadStates, HostStatesStayPinnedAndInPlace) {
  tiny_gpt::ensure_comm();
  auto& acc = deepspeed::accelerator::get_accelerator();
  if (!acc.pin_memory_supported()) GTEST_SKIP() << "needs an accelerator (runs in the GPU check)";
  auto c = tiny_gpt::config();
  auto data = tiny_gpt::dataset(c);
  const std::string json = R"({"train_micro_batch_size_per_gpu": 2, "steps_per_print": 1000,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}})";
  auto cfg = deepspeed::Config::from_string(json);
  auto ref_model = tiny_gpt::make_model(c);
  auto ref = deepspeed::initialize(ref_model, cfg);
  tiny_gpt::train(ref, data, 1);
  tiny_gpt::train(ref, data, 2);
  auto want = tiny_gpt::snapshot(ref_model);

  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, cfg);
  tiny_gpt::train(engine, data, 1);
  deepspeed::OffloadStatesOptions masters_only;
  masters_only.include = {deepspeed::OffloadStateType::kHpParams};
  engine.offload_states(masters_only);
  EXPECT_EQ(engine.offloaded_state_bytes(), 0) << "the host masters were copied to the host again";
  engine.reload_states();
  engine.offload_states();  // the parameters' flat buffers and gradients are on the device: they move
  EXPECT_GT(engine.offloaded_state_bytes(), 0);
  engine.reload_states();
  tiny_gpt::train(engine, data, 2);
  auto got = tiny_gpt::snapshot(model);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "param " << i;
}

}  // namespace
