// GenerationConfig: generation_config.json files as transformers' save_pretrained writes them (logits_reference.py)
// read back with their values and transformers' defaults, and each bad file refused in one line naming the file and
// the key.
#include "deepspeed/inference/generation_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/error.h"
#include "temp_dir.h"

namespace {

using deepspeed::inference::GenerationConfig;

std::string saved_by_transformers(const std::string& model) {
  const char* dir = std::getenv("DS_INFERENCE_REFERENCE");
  if (dir == nullptr)
    throw std::runtime_error("DS_INFERENCE_REFERENCE is not set: run through ctest (fixture inference_reference)");
  return std::string(dir) + "/" + model + "/generation_config.json";
}

// The message of the ConfigError `read` throws ("no error" when it throws none).
std::string error_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const deepspeed::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::string error_of_json(const std::string& text) {
  return error_of([&] { GenerationConfig::from_json(text, "generation_config.json"); });
}

TEST(GenerationConfig, DefaultsAreTransformers) {
  const GenerationConfig c = GenerationConfig::from_json("{}", "generation_config.json");
  EXPECT_EQ(c.max_new_tokens, 20);
  EXPECT_FALSE(c.do_sample);
  EXPECT_EQ(c.temperature, 1.0);
  EXPECT_EQ(c.top_k, 50);
  EXPECT_EQ(c.top_p, 1.0);
  EXPECT_EQ(c.repetition_penalty, 1.0);
  EXPECT_TRUE(c.eos_token_id.empty());
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_FALSE(c.seed.has_value());
  EXPECT_FALSE(c.max_length.has_value());
  EXPECT_EQ(c.new_token_limit(100), 20);
}

TEST(GenerationConfig, ReadsLlama3AsTransformersSavedIt) {
  const GenerationConfig c = GenerationConfig::from_file(saved_by_transformers("llama3"));
  EXPECT_TRUE(c.do_sample);
  EXPECT_EQ(c.temperature, 0.6);
  EXPECT_EQ(c.top_p, 0.9);
  EXPECT_EQ(c.top_k, 50);
  EXPECT_EQ(c.repetition_penalty, 1.0);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.max_new_tokens, 20);
}

TEST(GenerationConfig, ReadsLlama2WithItsMaxLength) {
  const GenerationConfig c = GenerationConfig::from_file(saved_by_transformers("llama2"));
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{2}));  // a single id, as a one-element list
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.max_length, 4096);
  EXPECT_EQ(c.new_token_limit(96), 4000);  // max_length counts the prompt
  EXPECT_EQ(c.new_token_limit(5000), 1);   // transformers still generates one token past a long prompt
}

TEST(GenerationConfig, ReadsQwen2WithTopKAndPenalty) {
  const GenerationConfig c = GenerationConfig::from_file(saved_by_transformers("qwen2"));
  EXPECT_EQ(c.top_k, 20);
  EXPECT_EQ(c.top_p, 0.8);
  EXPECT_EQ(c.temperature, 0.7);
  EXPECT_EQ(c.repetition_penalty, 1.05);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(c.pad_token_id, 151643);
}

TEST(GenerationConfig, MaxNewTokensTakesPrecedenceOverMaxLength) {
  const GenerationConfig c =
      GenerationConfig::from_json(R"({"max_new_tokens": 5, "max_length": 100})", "generation_config.json");
  EXPECT_FALSE(c.max_length.has_value());
  EXPECT_EQ(c.new_token_limit(50), 5);
}

TEST(GenerationConfig, IgnoresInformationalKeysAndInertValues) {
  // Keys that change no token here, unknown keys (transformers ignores them too), and unimplemented keys at the
  // value that switches them off (null, transformers' default, an empty list).
  const GenerationConfig c = GenerationConfig::from_json(R"({
      "bos_token_id": 1, "transformers_version": "4.45.0", "_from_model_config": true, "use_cache": true,
      "cache_implementation": "static", "early_stopping": true, "length_penalty": 1.5, "renormalize_logits": true,
      "decoder_start_token_id": null, "chat_format": "chatml",
      "num_beams": 1, "typical_p": 1.0, "min_p": null, "suppress_tokens": [], "no_repeat_ngram_size": 0,
      "temperature": 0.0, "top_k": 0, "pad_token_id": null})",
                                                         "generation_config.json");
  EXPECT_EQ(c.top_k, 0);
  EXPECT_EQ(c.temperature, 0.0);  // ignored by greedy search, as transformers does (it only warns)
  EXPECT_FALSE(c.pad_token_id.has_value());
}

TEST(GenerationConfig, BadFilesNameTheFileAndKey) {
  ds_test::TempDir dir("generation_config");
  struct Bad {
    const char* json;
    const char* message;  // after "<path>: "
  };
  const std::vector<Bad> cases = {
      {R"({"do_sample": true, "top_p": 1.5})", "top_p must be in (0, 1], got 1.5"},
      {R"({"num_beams": 4})",
       "num_beams 4 is not implemented (beam search; only greedy search and sampling are; transformers' default is "
       "1)"},
      {R"({"do_sample": true, "temperature": 0.0})",
       "temperature must be > 0 when do_sample is true, got 0 (for greedy decoding set do_sample to false)"},
      {R"({"eos_token_id": "x"})", R"(eos_token_id must be a token id or a list of token ids, got "x")"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("bad" + std::to_string(i) + ".json");
    std::ofstream(path) << cases[i].json;
    EXPECT_EQ(error_of([&] { GenerationConfig::from_file(path); }), path + ": " + cases[i].message);
  }
  const std::string not_json = dir.file("not_json.json");
  std::ofstream(not_json) << "{\"top_p\": 0.9,\n oops";
  const std::string got = error_of([&] { GenerationConfig::from_file(not_json); });
  EXPECT_EQ(got.rfind(not_json + ": not JSON (", 0), 0u) << got;
  EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  EXPECT_EQ(error_of([&] { GenerationConfig::from_file(dir.file("missing.json")); }),
            dir.file("missing.json") + ": cannot read the generation config");
}

TEST(GenerationConfig, RefusesUnimplementedModesByName) {
  EXPECT_EQ(error_of_json(R"({"penalty_alpha": 0.6, "top_k": 4})"),
            "generation_config.json: penalty_alpha 0.6 is not implemented (contrastive search; only greedy search "
            "and sampling are; transformers' default is 0.0)");
  for (const char* key : {"typical_p", "min_p", "no_repeat_ngram_size", "num_return_sequences", "min_new_tokens",
                          "suppress_tokens", "forced_eos_token_id", "stop_strings", "dola_layers"}) {
    const std::string value = std::string(key) == "suppress_tokens" ? "[5]" : "3";
    const std::string got = error_of_json(std::string("{\"") + key + "\": " + value + "}");
    EXPECT_EQ(got.rfind(std::string("generation_config.json: ") + key + " " + value + " is not implemented", 0), 0u)
        << got;
  }
}

TEST(GenerationConfig, RefusesValuesTransformersRefuses) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"top_k": -1})", "generation_config.json: top_k must be >= 0 (0 disables it), got -1"},
      {R"({"top_k": 5.5})", "generation_config.json: top_k must be an integer, got 5.5"},
      {R"({"repetition_penalty": 0})", "generation_config.json: repetition_penalty must be > 0 (1 disables it), got 0"},
      {R"({"max_new_tokens": 0})", "generation_config.json: max_new_tokens must be > 0, got 0"},
      {R"({"do_sample": "yes"})", R"(generation_config.json: do_sample must be true or false, got "yes")"},
      {R"({"pad_token_id": -1})", "generation_config.json: pad_token_id must be >= 0, got -1"},
      {R"({"eos_token_id": [1, 2.5]})",
       "generation_config.json: eos_token_id must be a token id or a list of token ids, got [1,2.5]"},
      {R"({"top_p": 0})", "generation_config.json: top_p must be in (0, 1], got 0"},
      {R"({"temperature": "hot"})", R"(generation_config.json: temperature must be a number, got "hot")"},
      {R"([1, 2])", "generation_config.json: not a JSON object"},
  };
  for (const auto& [json, message] : cases) EXPECT_EQ(error_of_json(json), message) << json;
}

}  // namespace
