// A Llama-family model loaded from a transformers folder, trained by deepspeed::initialize's engine, and saved back
// as a folder transformers loads (check_hf_folder.py reads what this writes: our logits beside the weights).
// DS_HF_MODELS: the folders of make_hf_models.py; DS_HF_SAVED: where to write.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"

namespace {

namespace dm = deepspeed::models;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// Each family in turn: a few AdamW steps at ZeRO stage `stage` (the loss must fall on the repeated batch), then the
// folder (save_hf_folder, or the engine's save_16bit_model into model.safetensors) with our logits of a fixed batch
// for transformers to reproduce.
void train_and_save(const std::string& name, int stage, bool via_engine) {
  SCOPED_TRACE(name);
  const std::string in = env("DS_HF_MODELS") + "/" + name;
  dm::LlamaForCausalLM model(dm::LlamaConfig::from_file(in + "/config.json"));
  dm::load_hf_weights(*model, in);
  const deepspeed::Config config = deepspeed::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
          "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}},
          "zero_optimization": {"stage": )" +
      std::to_string(stage) + "}}");
  auto engine = deepspeed::initialize(model, config);
  const at::Tensor tokens = at::randint(model->config().vocab_size, {2, 12}, at::kLong);
  const at::Tensor targets = at::roll(tokens, -1, 1);
  double first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    at::Tensor loss = engine.forward(tokens, targets);
    engine.backward(loss);
    engine.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first);
  const std::string out = env("DS_HF_SAVED") + "/" + name;
  std::filesystem::remove_all(out);  // each writer makes its folder, as DeepSpeed's save_16bit_model does
  if (via_engine) {
    // DeepSpeed's save_16bit_model, as HF's Trainer calls it, into model.safetensors; the config beside it.
    ASSERT_TRUE(engine.save_16bit_model(out, "model.safetensors"));
    dm::write_hf_index(out, 1, model->config().json);
  } else {
    dm::save_hf_folder(out, dm::gather_hf_weights(*model), model->config().json);
  }
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->logits(tokens);
  deepspeed::checkpoint::save_safetensors(out + "/ours.safetensors", {{"tokens", tokens}, {"logits", logits}}, {});
}

TEST(LlamaEngine, TrainedFoldersForTransformers) {
  ASSERT_FALSE(env("DS_HF_MODELS").empty() || env("DS_HF_SAVED").empty()) << "ctest sets DS_HF_MODELS, DS_HF_SAVED";
  at::manual_seed(3);
  train_and_save("llama", 0, /*via_engine=*/false);
  train_and_save("qwen2", 0, /*via_engine=*/true);
}

}  // namespace
