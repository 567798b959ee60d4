// Fine-tuning data end to end against Hugging Face: ds_preprocess --sft tokenized prompt/response pairs
// (tests/data/make_sft.py), SftDataset cuts and pads them into inputs and targets with -100 on the prompt and past
// the end, and our Llama's loss on each sample equals transformers' loss with the labels an SFT trainer builds from
// the same pairs (tokenizers' ids, -100 on the prompt), on the same tiny model. So the loss counts exactly the
// response's tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepspeed/data/sft_dataset.h"
#include "deepspeed/error.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "tolerance.h"

namespace {

namespace dd = deepspeed::data;
namespace dm = deepspeed::models;
using json = nlohmann::json;
constexpr int64_t kSeq = 32;  // make_sft.py's SEQ

std::string dir() {
  const char* d = std::getenv("DS_SFT_DATA");
  return d == nullptr ? "" : d;
}

TEST(SftDataset, TargetsAndLossAreTransformers) {
  ASSERT_FALSE(dir().empty()) << "ctest sets DS_SFT_DATA";
  std::ifstream in(dir() + "/expected.json");
  const json expected = json::parse(in);
  dd::SftDatasetOptions o;
  o.sequence_length = kSeq;
  dd::SftDataset sft(dir() + "/pairs", o);
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
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), kSeq + 1);
    for (int64_t t = 0; t < kSeq; ++t) {
      EXPECT_EQ(sample[static_cast<size_t>(t)], t < n ? ids[static_cast<size_t>(t)] : 0)
          << "doc " << d << " input " << t;
      // transformers shifts the labels inside its loss: position t predicts label t + 1.
      const int64_t want = t + 1 < n ? labels[static_cast<size_t>(t + 1)] : -100;
      EXPECT_EQ(sample[static_cast<size_t>(kSeq + t)], want) << "doc " << d << " target " << t;
    }
    at::Tensor x = at::tensor(std::vector<int64_t>(sample.begin(), sample.begin() + kSeq), at::kLong).unsqueeze(0);
    at::Tensor y = at::tensor(std::vector<int64_t>(sample.begin() + kSeq, sample.end()), at::kLong).unsqueeze(0);
    at::NoGradGuard no_grad;
    const double ours = model->forward(x, y).item<double>(), theirs = expected[d]["loss"].get<double>();
    // The same fp32 kernels; the softmax's sum over the vocabulary and the mean over the counted tokens may round
    // in another order.
    EXPECT_WITHIN(std::abs(ours - theirs) / theirs,
                  tolerance::reordered(tolerance::kFp32Epsilon, model->config().vocab_size + kSeq, 1))
        << "doc " << d;
  }
  for (bool s : seen) EXPECT_TRUE(s);
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

}  // namespace
