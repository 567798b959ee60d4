// InferenceConfig (deepspeed/inference/inference_config.h) against DeepSpeed's own DeepSpeedInferenceConfig
// (inference_config_reference.py): every config DeepSpeed reads gives the same dtype, tensor-parallel size,
// max_out_tokens and kernel-injection switch here (aliases mp_size, kernel_inject and max_tokens included), and every
// config DeepSpeed refuses is refused here. Then what DeepSpeed accepts but is not built here is refused by name, and
// init_inference checks the model's split against tp_size and the KV cache's bound.
#include "deepspeed/inference/inference_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "deepspeed/error.h"
#include "deepspeed/inference/engine.h"

namespace {

namespace di = deepspeed::inference;

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    default:
      return "other";
  }
}

std::string message(const std::string& json) {
  try {
    di::InferenceConfig::from_json(json, "ds_inference.json");
  } catch (const deepspeed::ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(InferenceConfig, ReadsWhatDeepSpeedReads) {
  const char* dir = std::getenv("DS_INFERENCE_CONFIGS");
  ASSERT_NE(dir, nullptr) << "ctest sets DS_INFERENCE_CONFIGS";
  std::ifstream in(std::string(dir) + "/inference_configs.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c.at("config").dump();
    SCOPED_TRACE(text);
    const nlohmann::json& want = c.at("deepspeed");
    if (want.is_null()) {
      EXPECT_THROW(di::InferenceConfig::from_json(text), deepspeed::ConfigError);
      continue;
    }
    const di::InferenceConfig got = di::InferenceConfig::from_json(text);
    EXPECT_EQ(dtype_name(got.dtype), want.at("dtype").get<std::string>());
    EXPECT_EQ(got.tp_size, want.at("tp_size").get<int>());
    EXPECT_EQ(got.max_out_tokens, want.at("max_out_tokens").get<int64_t>());
    EXPECT_EQ(got.replace_with_kernel_inject, want.at("kernel_inject").get<bool>());
  }
}

TEST(InferenceConfig, WhatIsNotBuiltIsRefusedByName) {
  EXPECT_EQ(message(R"({"enable_cuda_graph": true})"),
            "ds_inference.json: enable_cuda_graph true is not implemented (CUDA graphs; DeepSpeed's default is false)");
  EXPECT_EQ(message(R"({"quant": {"enabled": true}})"),
            "ds_inference.json: quant {\"enabled\":true} is not implemented (quantized inference; DeepSpeed's default "
            "is {})");
  EXPECT_EQ(message(R"({"dtype": "int8"})"),
            "ds_inference.json: dtype must be fp32, fp16 or bf16 (or torch.float32, torch.float16, torch.bfloat16), "
            "got \"int8\"");
  EXPECT_EQ(message(R"({"tensor_parallel": {"tp_size": 0}})"),
            "ds_inference.json: tensor_parallel.tp_size must be >= 1, got 0");
  EXPECT_EQ(message(R"({"max_out_tokens": "many"})"),
            "ds_inference.json: max_out_tokens must be an integer, got \"many\"");
  EXPECT_EQ(message(R"({"zero": {"stage": 3}})").rfind("ds_inference.json: zero ", 0), 0u);
  EXPECT_EQ(message("[1]"), "ds_inference.json: not a JSON object");
  // At their defaults these keys ask for nothing: accepted.
  EXPECT_EQ(message(R"({"enable_cuda_graph": false, "quant": {"enabled": false}, "use_triton": false})"), "accepted");
}

TEST(InferenceConfig, InitInferenceChecksTheSplitAndTheCacheBound) {
  const std::string json = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16,
      "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})";
  di::InferenceConfig cfg;
  cfg.dtype = c10::ScalarType::Float;
  cfg.max_out_tokens = 10;
  auto engine = deepspeed::init_inference(
      deepspeed::models::LlamaForCausalLM(deepspeed::models::LlamaConfig::from_json(json)), cfg);
  EXPECT_FALSE(engine.module()->is_training());
  di::GenerationConfig g;
  g.max_new_tokens = 6;
  EXPECT_EQ(engine.generate({{1, 2, 3, 4}}, g).tokens.front().size(), 6u);  // 4 + 6 = 10 fits
  try {
    engine.generate({{1, 2, 3, 4, 5}}, g);
    ADD_FAILURE() << "11 positions were accepted under max_out_tokens 10";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "init_inference: a prompt of 5 tokens plus up to 6 new ones exceeds max_out_tokens 10 (raise it in the "
        "inference config, or lower max_new_tokens)");
  }
  cfg.tp_size = 2;
  EXPECT_THROW(deepspeed::init_inference(
                   deepspeed::models::LlamaForCausalLM(deepspeed::models::LlamaConfig::from_json(json)), cfg),
               deepspeed::ConfigError);
  // bf16: the weights and the cache follow the config's dtype.
  cfg.tp_size = 1;
  cfg.dtype = c10::ScalarType::BFloat16;
  auto half = deepspeed::init_inference(
      deepspeed::models::LlamaForCausalLM(deepspeed::models::LlamaConfig::from_json(json)), cfg);
  EXPECT_EQ(half.module()->parameters().front().scalar_type(), c10::ScalarType::BFloat16);
  EXPECT_EQ(half.generate({{1, 2}}, g).tokens.front().size(), 6u);
}

}  // namespace
