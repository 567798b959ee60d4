// The Llama family (deepspeed/models/llama.h, hf_checkpoint.h) against transformers itself: tiny random models made
// and saved by transformers (make_hf_models.py, the ctest fixture hf_models), loaded here from their folders; our
// logits and loss must be transformers' for the same batch. Then the bad folders and configs users bring, each
// refused by file, key or tensor with the model left as it was; and our saved folders read back.
#include "deepspeed/models/llama.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "checkpoint/safetensors_reader.h"
#include "checkpoint/safetensors_writer.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "scoped_env.h"
#include "temp_dir.h"
#include "tolerance.h"

namespace {

namespace fs = std::filesystem;
namespace dm = deepspeed::models;
using deepspeed::ConfigError;
using deepspeed::checkpoint::CheckpointError;
using ::testing::HasSubstr;

std::string models_dir() {
  const char* d = std::getenv("DS_HF_MODELS");
  return d != nullptr ? d : "";
}

// Not a skip: ctest sets it, and a suite that silently skipped its references would pass having checked nothing.
#define REQUIRE_MODELS() ASSERT_FALSE(models_dir().empty()) << "DS_HF_MODELS: the folders of make_hf_models.py"

std::map<std::string, at::Tensor> reference(const std::string& path) {
  deepspeed::checkpoint::SafetensorsFile f(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& t : f.tensors()) out[t.name] = f.tensor(t).clone();
  return out;
}

dm::LlamaForCausalLM load(const std::string& folder, at::ScalarType dtype = at::kFloat) {
  dm::LlamaForCausalLM model(dm::LlamaConfig::from_file(folder + "/config.json"));
  model->to(dtype);
  dm::load_hf_weights(*model, folder);
  return model;
}

std::map<std::string, at::Tensor> parameters_of(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// Our logits of the reference batch against transformers'. The two forwards run the same operations (matmuls over
// at most intermediate_size terms, softmax over the sequence) in possibly other orders, through 2 layers of 3
// chained sums each.
void expect_transformers_logits(const std::string& name, const std::string& ref_name) {
  SCOPED_TRACE(name);
  const std::string dir = models_dir() + "/" + name;
  dm::LlamaForCausalLM model = load(dir);
  const auto ref = reference(models_dir() + "/" + ref_name + ".reference.safetensors");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->logits(ref.at("tokens"));
  const double bound = tolerance::reordered(tolerance::kFp32Epsilon, model->config().intermediate_size,
                                            3 * model->config().num_hidden_layers);
  EXPECT_WITHIN(tolerance::relative_max_error(logits, ref.at("logits")), bound);
  const at::Tensor loss = model->forward(ref.at("tokens"), ref.at("targets"));
  EXPECT_WITHIN(std::abs(loss.item<double>() - ref.at("loss").item<double>()) / ref.at("loss").item<double>(), bound);
}

TEST(LlamaFamily, LogitsAreTransformers) {
  REQUIRE_MODELS();
  for (const char* name : {"llama", "qwen2", "mistral", "qwen3", "qwen2_v4"}) expect_transformers_logits(name, name);
  // The same llama weights from three shards and an index.
  expect_transformers_logits("llama_sharded", "llama");
}

// inject_kernels (init_inference's kernel injection: fused q/k/v and gate/up, on a CPU every plain linear weight
// packed for oneDNN, the head's included) keeps transformers' logits without gradients and leaves the separate, exact
// matmuls with gradients. Then weights changed in place after the injection (a checkpoint loaded into a served
// model) must give the new weights' logits: a packed copy gone stale would keep the old ones (off by O(1)).
TEST(LlamaFamily, InjectedKernelsKeepTheLogitsAndFollowWeightChanges) {
  REQUIRE_MODELS();
  ScopedEnv pack_all("DS_PACKED_LINEAR", "1");  // the test folders' weights are under the size packing starts at
  for (const std::string name : {"llama", "qwen2", "qwen3"}) {  // untied; tied with q/k/v biases; q/k norms
    SCOPED_TRACE(name);
    const auto ref = reference(models_dir() + "/" + name + ".reference.safetensors");
    dm::LlamaForCausalLM plain = load(models_dir() + "/" + name), injected = load(models_dir() + "/" + name);
    injected->inject_kernels();
    const at::Tensor& tokens = ref.at("tokens");
    const double bound = tolerance::reordered(tolerance::kFp32Epsilon, plain->config().intermediate_size,
                                              3 * plain->config().num_hidden_layers);
    EXPECT_TRUE(at::equal(injected->logits(tokens), plain->logits(tokens)));  // with gradients
    at::NoGradGuard no_grad;
    EXPECT_WITHIN(tolerance::relative_max_error(injected->logits(tokens), ref.at("logits")), bound);
    for (dm::LlamaForCausalLM* m : {&plain, &injected}) {
      auto params = (*m)->named_parameters();
      for (const char* p : {"model.layers.0.self_attn.k_proj.weight", "model.layers.1.self_attn.o_proj.weight",
                            "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight",
                            "model.embed_tokens.weight", "lm_head.weight"})
        if (at::Tensor* t = params.find(p)) t->mul_(-1.5);
    }
    const at::Tensor changed = plain->logits(tokens);
    EXPECT_GT(tolerance::relative_max_error(changed, ref.at("logits")), 0.1);  // the change is not lost in the bound
    EXPECT_WITHIN(tolerance::relative_max_error(injected->logits(tokens), changed), bound);
  }
}

TEST(LlamaFamily, ConfigAsTransformersReadsIt) {
  REQUIRE_MODELS();
  const dm::LlamaConfig llama = dm::LlamaConfig::from_file(models_dir() + "/llama/config.json");
  EXPECT_EQ(llama.rope_scaling.type, "llama3");
  EXPECT_EQ(llama.rope_theta, 500000.0);
  EXPECT_EQ(llama.kv_groups(), 2);
  EXPECT_TRUE(llama.qkv_bias && llama.o_bias && llama.mlp_bias);
  const dm::LlamaConfig qwen2 = dm::LlamaConfig::from_file(models_dir() + "/qwen2_v4/config.json");
  EXPECT_EQ(qwen2.rope_scaling.type, "linear");
  EXPECT_EQ(qwen2.rope_theta, 50000.0);
  EXPECT_TRUE(qwen2.qkv_bias && !qwen2.o_bias && qwen2.tie_word_embeddings);
  const dm::LlamaConfig qwen3 = dm::LlamaConfig::from_file(models_dir() + "/qwen3/config.json");
  EXPECT_EQ(qwen3.head_dim, 16);
  EXPECT_TRUE(qwen3.qk_norm);
  // The parameter count is the model's (a tied head once).
  for (const dm::LlamaConfig& c : {llama, qwen2, qwen3}) {
    dm::LlamaForCausalLM m(c);
    int64_t n = 0;
    for (const auto& p : m->parameters()) n += p.numel();
    EXPECT_EQ(c.num_parameters(), n) << c.architecture;
  }
}

// bf16 weights and activations on both sides: each side rounds every op's result to bf16, so they drift apart by a
// few bf16 roundings per op; measured on the logits' scale.
TEST(LlamaFamily, Bf16LogitsAreTransformers) {
  REQUIRE_MODELS();
  dm::LlamaForCausalLM model = load(models_dir() + "/llama", at::kBFloat16);
  const auto ref = reference(models_dir() + "/llama.bf16.reference.safetensors");
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->logits(ref.at("tokens"));
  ASSERT_EQ(logits.scalar_type(), at::kBFloat16);
  EXPECT_WITHIN(tolerance::relative_max_error(logits.to(at::kFloat), ref.at("logits").to(at::kFloat)),
                tolerance::measured(0.0119, 0.0119));
}

std::string write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string config_error(const std::string& text) {
  try {
    dm::LlamaConfig::from_json(text, "my/config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(LlamaFamily, ConfigRefusalsNameTheKey) {
  const std::string base = R"({"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2)";
  EXPECT_EQ(config_error(base + R"(, "architectures": ["LlamaForCausalLM"]})"), "(accepted)");
  EXPECT_EQ(config_error(base + R"(, "architectures": ["GPT2LMHeadModel"]})"),
            "my/config.json: architectures \"GPT2LMHeadModel\" is not implemented (LlamaForCausalLM, "
            "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  EXPECT_THAT(config_error(base + R"(, "model_type": "llama", "rope_scaling": {"type": "yarn", "factor": 4}})"),
              HasSubstr("my/config.json: rope_scaling.type \"yarn\" is not implemented"));
  EXPECT_THAT(config_error(base + R"(, "model_type": "llama", "rope_parameters": {"rope_type": "dynamic"}})"),
              HasSubstr("rope_parameters.rope_type \"dynamic\" is not implemented"));
  EXPECT_THAT(config_error(base + R"(, "model_type": "llama", "hidden_act": "gelu"})"),
              HasSubstr("hidden_act \"gelu\" is not implemented"));
  EXPECT_THAT(config_error(base + R"(, "model_type": "mistral", "attention_bias": true})"),
              HasSubstr("my/config.json: attention_bias true: MistralForCausalLM has no such option"));
  EXPECT_THAT(config_error(base + R"(, "model_type": "qwen2", "use_sliding_window": true})"),
              HasSubstr("use_sliding_window true is not implemented"));
  EXPECT_THAT(config_error(base + R"(, "model_type": "llama", "num_key_value_heads": 3})"),
              HasSubstr("num_key_value_heads 3 must divide num_attention_heads 2"));
  EXPECT_THAT(config_error(R"({"model_type": "llama", "hidden_size": 8})"), HasSubstr("vocab_size is required"));
  EXPECT_THAT(config_error("{not json"), HasSubstr("my/config.json: not JSON"));
  EXPECT_THAT(config_error(base + R"(, "model_type": "llama", "attention_dropout": 0.1})"),
              HasSubstr("attention_dropout 0.1 is not implemented"));
  // Mistral's window is checked against each batch's sequence.
  dm::LlamaForCausalLM mistral(dm::LlamaConfig::from_json(base + R"(, "model_type": "mistral", "sliding_window": 4})"));
  EXPECT_NO_THROW(mistral->logits(at::zeros({1, 4}, at::kLong)));
  EXPECT_THAT(
      [&] {
        mistral->logits(at::zeros({1, 5}, at::kLong));
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("sliding_window 4 is shorter than the sequence of 5")));
}

// A copy of the llama folder with `model.safetensors` replaced.
struct BrokenFolder {
  ds_test::TempDir dir{"hf_broken"};
  BrokenFolder() { fs::copy_file(models_dir() + "/llama/config.json", dir.file("config.json")); }
  std::string weights() const { return dir.file("model.safetensors"); }
};

std::string load_error(const std::string& folder, dm::LlamaForCausalLM& model) {
  const auto before = parameters_of(*model);
  std::string msg = "(loaded)";
  try {
    dm::load_hf_weights(*model, folder);
  } catch (const CheckpointError& e) {
    msg = e.what();
  }
  for (const auto& [name, p] : parameters_of(*model))
    EXPECT_TRUE(at::equal(p, before.at(name))) << name << " changed by a refused load";
  return msg;
}

TEST(LlamaFamily, BadFoldersAreRefusedAndLoadNothing) {
  REQUIRE_MODELS();
  const std::string good = models_dir() + "/llama/model.safetensors";
  const auto tensors = reference(good);
  dm::LlamaForCausalLM model(dm::LlamaConfig::from_file(models_dir() + "/llama/config.json"));
  const std::vector<std::pair<std::string, std::string>> meta = {{"format", "pt"}};
  auto with = [&](const std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)>& change) {
    std::vector<std::pair<std::string, at::Tensor>> list(tensors.begin(), tensors.end());
    change(list);
    auto folder = std::make_unique<BrokenFolder>();
    deepspeed::checkpoint::save_safetensors(folder->weights(), list, meta);
    return folder;
  };
  {
    auto f = with([](auto& l) { l.erase(l.begin()); });
    EXPECT_THAT(load_error(f->dir.path(), model), HasSubstr("no tensor '" + tensors.begin()->first + "'"));
  }
  {
    auto f = with([](auto& l) { l.back().second = at::zeros({3, 3}); });
    EXPECT_THAT(load_error(f->dir.path(), model),
                HasSubstr("model.safetensors: tensor '" + tensors.rbegin()->first + "' has shape [3, 3]"));
  }
  {
    auto f = with([](auto& l) { l.emplace_back("model.layers.7.mlp.extra.weight", at::zeros({2})); });
    EXPECT_THAT(load_error(f->dir.path(), model),
                HasSubstr("tensor 'model.layers.7.mlp.extra.weight' is not in the model"));
  }
  {
    auto f = with([](auto&) {});
    fs::resize_file(f->weights(), fs::file_size(f->weights()) - 64);
    EXPECT_THAT(load_error(f->dir.path(), model), HasSubstr("lie outside the file's"));
  }
  {
    auto f = with([](auto&) {});
    std::fstream io(f->weights(), std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t huge = uint64_t{1} << 40;
    io.write(reinterpret_cast<const char*>(&huge), 8);
    io.close();
    EXPECT_THAT(load_error(f->dir.path(), model), HasSubstr("the header claims 1099511627776 bytes"));
  }
  {
    BrokenFolder empty;
    EXPECT_THAT(load_error(empty.dir.path(), model), HasSubstr("no model.safetensors or model.safetensors.index.json"));
  }
  {
    BrokenFolder lying_index;
    fs::copy_file(good, lying_index.weights());
    write(lying_index.dir.file("model.safetensors.index.json"),
          R"({"weight_map": {"model.norm.weight": "model.safetensors", "lm_head.weight": "other.safetensors"}})");
    EXPECT_THAT(load_error(lying_index.dir.path(), model), HasSubstr("other.safetensors: cannot open"));
  }
}

int shard_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().rfind("model-", 0) == 0;
  return n;
}

// What we save, sharded or not, loads back bit for bit, and a later save with other sharding leaves no stale file.
TEST(LlamaFamily, SavedFolderLoadsBack) {
  REQUIRE_MODELS();
  dm::LlamaForCausalLM model = load(models_dir() + "/qwen2");
  ds_test::TempDir out("hf_saved");
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& p : model->named_parameters()) weights.emplace_back(p.key(), p.value());
  dm::HfSaveOptions sharded;
  sharded.max_shard_bytes = 16 << 10;
  dm::save_hf_folder(out.path(), weights, model->config().json, sharded);
  EXPECT_TRUE(fs::exists(out.file("model.safetensors.index.json")));
  EXPECT_GE(shard_files(out.path()), 2);
  dm::LlamaForCausalLM back(dm::LlamaConfig::from_file(out.file("config.json")));
  dm::load_hf_weights(*back, out.path());
  for (const auto& [name, p] : parameters_of(*back)) EXPECT_TRUE(at::equal(p, parameters_of(*model).at(name))) << name;
  dm::HfSaveOptions bf16;
  bf16.dtype = at::kBFloat16;
  dm::save_hf_folder(out.path(), weights, model->config().json, bf16);
  EXPECT_FALSE(fs::exists(out.file("model.safetensors.index.json")));
  EXPECT_EQ(shard_files(out.path()), 0);
  EXPECT_EQ(dm::LlamaConfig::from_file(out.file("config.json")).dtype, at::kBFloat16);
  deepspeed::checkpoint::SafetensorsFile saved(out.file("model.safetensors"));
  EXPECT_EQ(saved.tensors().front().dtype, at::kBFloat16);
  EXPECT_EQ(saved.find("lm_head.weight"), nullptr);  // tied: transformers ties it again
}

}  // namespace
