// deepspeed::data::Tokenizer against Hugging Face `tokenizers` (tests/data/make_tokenizers.py trained two byte-level
// BPE tokenizers with it and wrote its ids for a multilingual text: Latin with diacritics, combining marks, CJK,
// Hangul, emoji sequences with joiners and modifiers, whitespace runs, digits, code, special tokens in the text):
// the same ids, with and without the post-processor's special tokens; and the same text back from decode, for each
// text's ids, every id alone and ids that cut characters (U+FFFD where `tokenizers` puts it). Then what a
// tokenizer.json may ask for that is not built, refused by key.
#include "deepspeed/data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
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

// Every reference decode of make_tokenizers.py: each text's ids (with the BOS, skipping it and not), every id alone,
// each text cut after and before every token, and byte tokens that are not UTF-8. A wrong byte-to-character
// inverse, added tokens sent around the decoder, special tokens kept or dropped wrongly, U+FFFD per byte instead of
// per ill-formed subpart, or no space-join without a decoder each show here.
TEST(Tokenizer, DecodesAsTokenizersDoes) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_TOKENIZERS";
  for (const char* name : {"gpt2", "llama3", "qwen2", "nfkc", "shipped", "spm", "nodecoder"}) {
    SCOPED_TRACE(name);
    const auto tok = dd::Tokenizer::from_file(dir() + "/" + name);
    std::ifstream in(dir() + "/" + name + ".decode.json");
    const json cases = json::parse(in);
    ASSERT_GT(cases.size(), 400u);
    int wrong = 0, replaced = 0;
    for (const auto& c : cases) {
      const auto ids = c["ids"].get<std::vector<int64_t>>();
      const std::string want = c["text"].get<std::string>();
      const std::string got = tok->decode(ids, c["skip_special_tokens"].get<bool>());
      if (want.find("\xEF\xBF\xBD") != std::string::npos) ++replaced;
      if (got == want) continue;
      ADD_FAILURE() << "ids " << c["ids"].dump() << " skip " << c["skip_special_tokens"] << ": got '" << got
                    << "', want '" << want << "'";
      if (++wrong == 10) break;
    }
    if (std::string(name) != "nodecoder") EXPECT_GT(replaced, 10) << "the cuts must reach the U+FFFD path";
  }
}

// Without a normalizer, decode(encode(text)) is the text; with the BOS too when decode skips it.
TEST(Tokenizer, DecodeGivesEncodedTextBack) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_TOKENIZERS";
  for (const char* name : {"gpt2", "llama3", "shipped"}) {
    SCOPED_TRACE(name);
    const auto tok = dd::Tokenizer::from_file(dir() + "/" + name);
    std::ifstream in(dir() + "/" + name + ".expected.json");
    for (const auto& e : json::parse(in)) {
      const std::string text = e["text"].get<std::string>();
      EXPECT_EQ(tok->decode(tok->encode(text, false)), text);
      if (text.find("<|") == std::string::npos) EXPECT_EQ(tok->decode(tok->encode(text, true), true), text);
    }
  }
}

// The llama3 tokenizer.json with `change` applied, written into `tmp`; its path.
std::string changed_llama3(const std::function<void(json&)>& change, const ds_test::TempDir& tmp) {
  std::ifstream in(dir() + "/llama3/tokenizer.json");
  json j = json::parse(in);
  change(j);
  const std::string path = tmp.file("tokenizer.json");
  std::ofstream(path) << j.dump();
  return path;
}

// `call` must throw DataError whose message holds each of `says`.
void expect_data_error(const std::function<void()>& call, const std::vector<std::string>& says) {
  try {
    call();
    ADD_FAILURE() << "no error, expected one saying " << says[0];
  } catch (const deepspeed::DataError& e) {
    for (const auto& s : says) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

// Ids outside the vocabulary are named with its size (tokenizers drops them without a word); a decoder decode cannot
// follow still loads and encodes, and decode says which decoder; a Sequence holding only ByteLevel decodes as
// ByteLevel, an empty one as the token strings joined.
TEST(Tokenizer, DecodeRefusesWhatItCannotDecode) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_TOKENIZERS";
  const auto llama3 = dd::Tokenizer::from_file(dir() + "/llama3");
  expect_data_error([&] { llama3->decode({5, 12345}); }, {"token id 12345", "vocabulary size is 600"});
  expect_data_error([&] { llama3->decode({-1}, true); }, {"token id -1", "600"});
  const auto spm = dd::Tokenizer::from_file(dir() + "/spm");
  expect_data_error([&] { spm->decode({400}); }, {"token id 400", "vocabulary size is 400", "tokenizer.model"});
  expect_data_error([&] { spm->decode({-7}, true); }, {"token id -7"});

  const std::vector<int64_t> ids = llama3->encode("Grüße, 日本語 <|eot_id|>!", true);
  ds_test::TempDir tmp("tokenizer_decoder");
  const std::string metaspace = changed_llama3([](json& j) { j["decoder"] = {{"type", "Metaspace"}}; }, tmp);
  const auto refused = dd::Tokenizer::from_file(metaspace);
  EXPECT_EQ(refused->encode("Grüße", true), llama3->encode("Grüße", true));
  expect_data_error([&] { refused->decode(ids); }, {metaspace, "decoder type \"Metaspace\""});
  const std::string strip = changed_llama3(
      [](json& j) {
        j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteLevel"}}, {{"type", "Strip"}}}}};
      },
      tmp);
  expect_data_error([&] { dd::Tokenizer::from_file(strip)->decode(ids); }, {"decoder type \"Strip\""});
  const std::string sequence = changed_llama3(
      [](json& j) {
        j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteLevel"}}}}};
      },
      tmp);
  EXPECT_EQ(dd::Tokenizer::from_file(sequence)->decode(ids, false), "<|begin_of_text|>Grüße, 日本語 <|eot_id|>!");
  // An empty Sequence passes the token strings through and joins them without the spaces of no decoder at all.
  const std::string empty = changed_llama3(
      [](json& j) {
        j["decoder"] = {{"type", "Sequence"}, {"decoders", json::array()}};
      },
      tmp);
  std::string joined = dd::Tokenizer::from_file(dir() + "/nodecoder")->decode(ids);
  std::erase(joined, ' ');  // byte-level token strings hold no spaces (a space is "Ġ")
  EXPECT_EQ(dd::Tokenizer::from_file(empty)->decode(ids), joined);
}

// A copy of the llama3 tokenizer.json with `change` applied must be refused with a message holding `says`.
void expect_refused(const std::function<void(json&)>& change, const std::string& says) {
  ds_test::TempDir tmp("tokenizer_bad");
  const std::string path = changed_llama3(change, tmp);
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
