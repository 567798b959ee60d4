// generate over our GPT (models/gpt.h: make_kv_cache, decode, as a CachedDecoder) against greedy decoding written
// out in plain LibTorch with the GPT's whole forward and no cache: at each step the argmax of the last position's
// logits of the whole sequence so far. Each prompt alone, and three of different lengths batched (left-padded: the
// mask and the learned positions counted from each prompt's first token). Weights are scaled up so the logits differ
// by far more than rounding (a tie could otherwise go either way between two correct computations).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <vector>

#include "deepspeed/inference/generate.h"
#include "gpt.h"

namespace {

namespace di = deepspeed::inference;
using Rows = std::vector<std::vector<int64_t>>;

deepspeed::models::GPT make_gpt() {
  deepspeed::models::GPTConfig c;
  c.vocab_size = 64;
  c.seq_len = 48;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.init_seed = 11;
  deepspeed::models::GPT gpt(c);
  at::NoGradGuard no_grad;
  for (auto& p : gpt->parameters()) p.mul_(8.0);
  gpt->eval();
  return gpt;
}

// Greedy decoding without a cache: the whole sequence through forward at every step.
std::vector<int64_t> plain_greedy(deepspeed::models::GPT& gpt, std::vector<int64_t> ids, int64_t n) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor logits = gpt->logits(at::tensor(ids, at::kLong).unsqueeze(0));
    const int64_t next = logits[0][-1].argmax().item<int64_t>();
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

di::CachedDecoder decoder_of(deepspeed::models::GPT& gpt) {
  di::CachedDecoder d;
  d.make_cache = [&gpt](int64_t b, int64_t c) { return gpt->make_kv_cache(b, c); };
  d.decode = [&gpt](const at::Tensor& t, const at::Tensor& p, deepspeed::models::LlamaKVCache& cache) {
    return gpt->decode(t, p, cache);
  };
  return d;
}

TEST(GptGenerate, GreedyEqualsTheUncachedLoop) {
  deepspeed::models::GPT gpt = make_gpt();
  const Rows prompts{{5, 9, 13, 2, 7}, {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50}, {3, 60}};
  di::GenerationConfig g;
  g.max_new_tokens = 30;
  g.pad_token_id = 0;
  Rows want;
  for (const auto& p : prompts) want.push_back(plain_greedy(gpt, p, g.max_new_tokens));
  size_t distinct = 0;
  for (const auto& row : want) distinct += std::set<int64_t>(row.begin(), row.end()).size();
  EXPECT_GT(distinct, 15u) << "the reference must not be one repeated token";
  EXPECT_EQ(di::generate(decoder_of(gpt), prompts, g).tokens, want);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(di::generate(decoder_of(gpt), {prompts[i]}, g).tokens.front(), want[i]) << "prompt " << i;
  // Past the learned positions: refused before anything runs.
  g.max_new_tokens = 40;
  EXPECT_THROW(di::generate(decoder_of(gpt), prompts, g), std::invalid_argument);
}

}  // namespace
