// deepspeed::data::Tokenizer against Hugging Face `tokenizers` (tests/data/make_tokenizers.py trained two byte-level
// BPE tokenizers with it and wrote its ids for a multilingual text: Latin with diacritics, combining marks, CJK,
// Hangul, emoji sequences with joiners and modifiers, whitespace runs, digits, code, special tokens in the text):
// the same ids, with and without the post-processor's special tokens. Then what a tokenizer.json may ask for that is
// not built, refused by key.
#include "deepspeed/data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepspeed/error.h"
#include "temp_dir.h"

namespace {

namespace dd = deepspeed::data;
using json = nlohmann::json;

std::string dir() {
  const char* d = std::getenv("DS_TOKENIZERS");
  return d == nullptr ? "" : d;
}

TEST(Tokenizer, GivesTokenizersIdsForEveryText) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_TOKENIZERS";
  // shipped: examples/tokenizer, the main job's; spm: a SentencePiece tokenizer.model.
  // qwen2 and nfkc: behind normalizers (NFC; NFKD then NFC).
  for (const char* name : {"gpt2", "llama3", "qwen2", "nfkc", "shipped", "spm"}) {
    SCOPED_TRACE(name);
    const auto tok = dd::Tokenizer::from_file(dir() + "/" + name);
    std::ifstream in(dir() + "/" + name + ".expected.json");
    const json expected = json::parse(in);
    ASSERT_GT(expected.size(), 10u);
    for (const auto& e : expected) {
      const std::string text = e["text"].get<std::string>();
      EXPECT_EQ(tok->encode(text, false), e["ids"].get<std::vector<int64_t>>()) << "text: " << text;
      EXPECT_EQ(tok->encode(text, true), e["ids_special"].get<std::vector<int64_t>>()) << "text: " << text;
    }
    const std::string n = name;
    EXPECT_EQ(tok->vocab_size(), n == "shipped" ? 4096 : n == "spm" ? 400 : 600);
  }
  const auto llama3 = dd::Tokenizer::from_file(dir() + "/llama3/tokenizer.json");
  EXPECT_EQ(llama3->token_id("<|end_of_text|>"), 1);
  EXPECT_EQ(llama3->token_id("no such token"), std::nullopt);
  const auto spm = dd::Tokenizer::from_file(dir() + "/spm/tokenizer.model");
  EXPECT_EQ(spm->token_id("</s>"), 2);
  EXPECT_EQ(spm->token_id("no such piece"), std::nullopt);
}

// A copy of the llama3 tokenizer.json with `change` applied must be refused with a message holding `says`.
void expect_refused(const std::function<void(json&)>& change, const std::string& says) {
  std::ifstream in(dir() + "/llama3/tokenizer.json");
  json j = json::parse(in);
  change(j);
  ds_test::TempDir tmp("tokenizer_bad");
  const std::string path = tmp.file("tokenizer.json");
  std::ofstream(path) << j.dump();
  try {
    dd::Tokenizer::from_file(path);
    ADD_FAILURE() << "accepted: " << says;
  } catch (const deepspeed::DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(says), std::string::npos) << what;
    EXPECT_NE(what.find(path), std::string::npos) << what;
  }
}

TEST(Tokenizer, RefusesWhatIsNotBuiltByKey) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_TOKENIZERS";
  expect_refused([](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type \"WordPiece\"");
  expect_refused([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer: type \"Lowercase\"");
  expect_refused(
      [](json& j) {
        j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}};
      },
      "normalizer: type \"Strip\"");
  expect_refused([](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback = true");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious"; },
                 "Split behavior \"MergedWithPrevious\"");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "type \"Metaspace\"");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
                 "does not compile");
  expect_refused([](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, "type \"BertProcessing\"");
  expect_refused([](json& j) { j["added_tokens"][0]["lstrip"] = true; }, "lstrip = true");
  ds_test::TempDir tmp("tokenizer_missing");
  EXPECT_THROW(dd::Tokenizer::from_file(tmp.path()), deepspeed::DataError);
  std::ofstream(tmp.file("tokenizer.json")) << "{not json";
  EXPECT_THROW(dd::Tokenizer::from_file(tmp.file("tokenizer.json")), deepspeed::DataError);
  std::ofstream(tmp.file("tokenizer.model")) << "not a model";
  try {
    dd::Tokenizer::from_file(tmp.file("tokenizer.model"));
    ADD_FAILURE() << "loaded a broken tokenizer.model";
  } catch (const deepspeed::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("not a SentencePiece model"), std::string::npos) << e.what();
  }
  // Text that is not UTF-8.
  const auto tok = dd::Tokenizer::from_file(dir() + "/gpt2");
  EXPECT_THROW(tok->encode(std::string("ok \xff\xfe bad"), false), deepspeed::DataError);
  // ... and through a normalizer, which would otherwise turn the bad bytes into U+FFFD without a word.
  const auto qwen2 = dd::Tokenizer::from_file(dir() + "/qwen2");
  EXPECT_THROW(qwen2->encode(std::string("ok \xff\xfe bad"), false), deepspeed::DataError);
}

}  // namespace
