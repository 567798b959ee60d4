// Fine-tuning data end to end against Hugging Face: ds_preprocess --sft tokenized prompt/response pairs and chat
// conversations (tests/data/make_sft.py), SftDataset cuts and pads them into inputs and targets with -100 on the prompt
// and past the end, and our Llama's loss on each sample equals transformers' loss with the labels an SFT trainer builds
// from the same pairs (tokenizers' ids, -100 on the prompt), on the same tiny model. So the loss counts exactly the
// response's tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepspeed/data/preprocess.h"
#include "deepspeed/data/sft_dataset.h"
#include "deepspeed/error.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "temp_dir.h"
#include "tolerance.h"

namespace {

namespace dd = deepspeed::data;
namespace dm = deepspeed::models;
using json = nlohmann::json;
constexpr int64_t kSeq = 32;      // make_sft.py's SEQ
constexpr int64_t kChatSeq = 96;  // and CHAT_SEQ

std::string dir() {
  const char* d = std::getenv("DS_SFT_DATA");
  return d == nullptr ? "" : d;
}

// One corpus of make_sft.py's against its expected_<name>.json, at sequence length `seq`.
void expect_transformers(const std::string& name, int64_t seq) {
  SCOPED_TRACE(name);
  std::ifstream in(dir() + "/expected_" + name + ".json");
  const json expected = json::parse(in);
  dd::SftDatasetOptions o;
  o.sequence_length = seq;
  dd::SftDataset sft(dir() + "/" + name, o);
  ASSERT_EQ(sft.size(), static_cast<int64_t>(expected.size()));
  dm::LlamaForCausalLM model(dm::LlamaConfig::from_file(dir() + "/sft_model/config.json"));
  dm::load_hf_weights(*model, dir() + "/sft_model");
  model->eval();
  std::vector<int64_t> sample(static_cast<size_t>(sft.sample_length()));
  std::vector<bool> seen(expected.size());
  for (int64_t i = 0; i < sft.size(); ++i) {
    const int64_t d = sft.document_of(i);
    seen[static_cast<size_t>(d)] = true;
    const auto ids = expected[d]["ids"].get<std::vector<int64_t>>();
    const auto labels = expected[d]["labels"].get<std::vector<int64_t>>();
    sft.read(i, sample.data());
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), seq + 1);
    for (int64_t t = 0; t < seq; ++t) {
      EXPECT_EQ(sample[static_cast<size_t>(t)], t < n ? ids[static_cast<size_t>(t)] : 0)
          << "doc " << d << " input " << t;
      // transformers shifts the labels inside its loss: position t predicts label t + 1.
      const int64_t want = t + 1 < n ? labels[static_cast<size_t>(t + 1)] : -100;
      EXPECT_EQ(sample[static_cast<size_t>(seq + t)], want) << "doc " << d << " target " << t;
    }
    at::Tensor x = at::tensor(std::vector<int64_t>(sample.begin(), sample.begin() + seq), at::kLong).unsqueeze(0);
    at::Tensor y = at::tensor(std::vector<int64_t>(sample.begin() + seq, sample.end()), at::kLong).unsqueeze(0);
    at::NoGradGuard no_grad;
    const double ours = model->forward(x, y).item<double>(), theirs = expected[d]["loss"].get<double>();
    // The same fp32 kernels; the softmax's sum over the vocabulary and the mean over the counted tokens may round
    // in another order.
    EXPECT_WITHIN(std::abs(ours - theirs) / theirs,
                  tolerance::reordered(tolerance::kFp32Epsilon, model->config().vocab_size + seq, 1))
        << "doc " << d;
  }
  for (bool s : seen) EXPECT_TRUE(s);
}

TEST(SftDataset, TargetsAndLossAreTransformers) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_SFT_DATA";
  expect_transformers("pairs", kSeq);
  // Conversations through the shipped Llama 3 chat template: ids and assistant masks as transformers'
  // apply_chat_template(return_assistant_tokens_mask=True) gives them, two trained turns in one conversation.
  expect_transformers("chats", kChatSeq);
}

TEST(SftDataset, RefusesMasksThatDoNotMatch) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_SFT_DATA";
  dd::SftDatasetOptions o;
  o.sequence_length = kSeq;
  // The pretraining corpus under another prefix has no mask beside it.
  try {
    dd::SftDataset missing(dir() + "/nothing", o);
    ADD_FAILURE() << "opened a missing SFT corpus";
  } catch (const deepspeed::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing_sft_document.idx"), std::string::npos) << e.what();
  }
  o.sequence_length = 0;
  EXPECT_THROW(dd::SftDataset(dir() + "/pairs", o), deepspeed::DataError);
  // More samples than documents: epochs, each a permutation.
  o.sequence_length = kSeq;
  o.num_samples = 13;
  dd::SftDataset three(dir() + "/pairs", o);
  EXPECT_EQ(three.size(), 13);
  std::vector<int> count(6);
  for (int64_t i = 0; i < 12; ++i) ++count[static_cast<size_t>(three.document_of(i))];
  for (int c : count) EXPECT_EQ(c, 2);
}

// preprocess_jsonl on `lines` with the chat template `tmpl` must fail with a DataError holding `says`, and write
// nothing.
void expect_chat_refused(const std::string& tmpl, const std::string& lines, const std::string& says, bool sft = true) {
  ds_test::TempDir tmp("chat_bad");
  std::ofstream(tmp.file("template.json")) << tmpl;
  std::ofstream(tmp.file("chats.jsonl")) << lines;
  dd::PreprocessOptions o;
  o.input = tmp.file("chats.jsonl");
  o.output_prefix = tmp.file("out");
  o.tokenizer = dir() + "/chat_tok";
  o.sft = sft;
  o.chat_template = tmp.file("template.json");
  try {
    dd::preprocess_jsonl(o);
    ADD_FAILURE() << "accepted: " << says;
  } catch (const deepspeed::DataError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("out_sft_document.bin"))) << says;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("out_sft_document.idx"))) << says;
}

TEST(ChatTemplate, RefusesBadTemplatesAndConversationsByName) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_SFT_DATA";
  const std::string ok_line =
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  const std::string user = R"("user": "U: {content}\n")";
  const std::string assistant = R"("assistant": "A: {% generation %}{content}<|eot_id|>{% endgeneration %}")";
  const std::string good = "{" + user + ", " + assistant + "}";
  expect_chat_refused("{" + user + ", " + assistant + R"(, "tool": "T: {content}"})", ok_line,
                      "template.json: unknown key \"tool\"");
  expect_chat_refused("{" + user + R"(, "assistant": "A: {content}"})", ok_line, "must mark what trains");
  expect_chat_refused(R"({"user": "{content}{content}", )" + assistant + "}", ok_line, "must hold {content} once");
  expect_chat_refused(R"({"user": "{% generation %}{content}{% endgeneration %}", )" + assistant + "}", ok_line,
                      "only the assistant's turn trains");
  expect_chat_refused("{" + user + "}", ok_line, "no \"assistant\" format");
  expect_chat_refused("{not json", ok_line, "template.json: not JSON");
  expect_chat_refused(good, ok_line + "\n" + R"({"messages": [{"role": "tool", "content": "x"}]})",
                      "chats.jsonl:2: message 0 has role \"tool\"");
  expect_chat_refused(good, R"({"text": "no conversation"})", "chats.jsonl:1: no \"messages\"");
  expect_chat_refused(good, R"({"messages": [{"role": "user", "content": "only a question"}]})",
                      "chats.jsonl:1: no assistant message");
  expect_chat_refused(good, R"({"messages": [{"role": "user", "text": "a"}]})",
                      "chats.jsonl:1: message 0 must be {\"role\"");
  expect_chat_refused(good,
                      R"({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "b"}]})",
                      "message 0 has role \"system\", which");
  expect_chat_refused(good, ok_line, "--chat-template: give --sft too", /*sft=*/false);
}

}  // namespace
