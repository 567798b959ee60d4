// One decoding step against transformers: process_logits against the scores transformers' own processors return
// (logits_reference.py: the list generate builds, so the order is theirs), greedy tokens against the argmax of
// those scores, seeded sampling reproducible and confined to the kept tokens, and mark_finished's pad and stop rule.
#include "deepspeed/inference/logits_processing.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/safetensors_reader.h"
#include "deepspeed/error.h"
#include "tolerance.h"

namespace {

using deepspeed::inference::GenerationConfig;
using deepspeed::inference::make_generator;
using deepspeed::inference::mark_finished;
using deepspeed::inference::next_tokens;
using deepspeed::inference::process_logits;

struct Case {
  std::string name;
  GenerationConfig config;
};

// What logits_reference.py wrote: the inputs, each case's settings and transformers' scores for it.
struct Reference {
  at::Tensor logits;     // [3, 50] fp32
  at::Tensor sequences;  // [3, 7] int64
  std::vector<Case> cases;
  std::map<std::string, at::Tensor> scores;
};

std::string reference_dir() {
  const char* dir = std::getenv("DS_INFERENCE_REFERENCE");
  if (dir == nullptr)
    throw std::runtime_error("DS_INFERENCE_REFERENCE is not set: run through ctest (fixture inference_reference)");
  return dir;
}

Reference load_reference() {
  const std::string dir = reference_dir();
  deepspeed::checkpoint::SafetensorsFile file(dir + "/logits.safetensors");
  auto tensor = [&](const std::string& name) {
    const auto* entry = file.find(name);
    if (entry == nullptr) throw std::runtime_error(dir + "/logits.safetensors has no tensor " + name);
    return file.tensor(*entry).clone();
  };
  Reference ref;
  ref.logits = tensor("logits");
  ref.sequences = tensor("sequences");
  std::ifstream in(dir + "/cases.json");
  for (const auto& c : nlohmann::json::parse(in)) {
    Case one{c.at("name").get<std::string>(), GenerationConfig{}};
    one.config.do_sample = c.at("do_sample").get<bool>();
    one.config.temperature = c.at("temperature").get<double>();
    one.config.top_k = c.at("top_k").get<int64_t>();
    one.config.top_p = c.at("top_p").get<double>();
    one.config.repetition_penalty = c.at("repetition_penalty").get<double>();
    ref.scores[one.name] = tensor("scores." + one.name);
    ref.cases.push_back(one);
  }
  return ref;
}

const Reference& reference() {
  static const Reference ref = load_reference();
  return ref;
}

const GenerationConfig& config_of(const std::string& name) {
  for (const Case& c : reference().cases)
    if (c.name == name) return c.config;
  throw std::runtime_error("logits_reference.py wrote no case " + name);
}

// The largest |got - want| / |want| over the finite scores. Each finite score is a logit through at most two
// roundings on each side (the penalty's multiply or divide, then the temperature's divide), each within half an
// epsilon relative, so the two sides are at most 2 epsilons apart whatever kernels compute them.
double finite_relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor finite = at::isfinite(want);
  const at::Tensor g = got.masked_select(finite).to(at::kDouble);
  const at::Tensor w = want.masked_select(finite).to(at::kDouble);
  return ((g - w).abs() / w.abs()).max().item<double>();
}

TEST(ProcessLogits, EqualsTransformersProcessors) {
  const Reference& ref = reference();
  ASSERT_EQ(ref.cases.size(), 12u);
  for (const Case& c : ref.cases) {
    SCOPED_TRACE(c.name);
    const at::Tensor want = ref.scores.at(c.name);
    const at::Tensor got = process_logits(ref.logits, ref.sequences, c.config);
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    ASSERT_EQ(got.sizes(), want.sizes());
    // A token kept where transformers filters it (or the reverse) changes what sampling can draw: exact.
    EXPECT_TRUE(at::equal(at::isneginf(got), at::isneginf(want)));
    EXPECT_TRUE(at::isfinite(got.masked_select(at::isfinite(want))).all().item<bool>());
    EXPECT_WITHIN(finite_relative_error(got, want), 2 * tolerance::kFp32Epsilon);
    // Greedy search takes the argmax of the processed scores: the same token as transformers in every row.
    GenerationConfig greedy = c.config;
    greedy.do_sample = false;
    EXPECT_TRUE(at::equal(next_tokens(got, greedy, nullptr), want.argmax(-1)));
  }
}

TEST(ProcessLogits, CasesFilterWhatTheyShould) {
  // Guards the reference itself: a case whose filter kept everything would not test the filter.
  const Reference& ref = reference();
  auto kept = [&](const std::string& name) { return at::isfinite(ref.scores.at(name)).sum(1); };
  EXPECT_TRUE(at::equal(kept("top_k"), at::full({3}, 5, at::kLong)));
  EXPECT_TRUE(at::equal(kept("top_p_tiny"), at::full({3}, 1, at::kLong)));
  EXPECT_TRUE(at::equal(kept("top_p_min"), at::full({3}, 1, at::kLong)));
  EXPECT_TRUE((kept("top_p") < 50).all().item<bool>());
  EXPECT_TRUE((kept("combined") <= 5).all().item<bool>());
  EXPECT_FALSE(at::equal(ref.scores.at("penalty"), ref.logits));
}

TEST(ProcessLogits, LeavesTheInputAloneAndComputesInFp32) {
  const Reference& ref = reference();
  const at::Tensor before = ref.logits.clone();
  const GenerationConfig& combined = config_of("combined");
  process_logits(ref.logits, ref.sequences, combined);
  EXPECT_TRUE(at::equal(ref.logits, before));
  const at::Tensor bf16 = ref.logits.to(at::kBFloat16);
  const at::Tensor got = process_logits(bf16, ref.sequences, combined);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(got, process_logits(bf16.to(at::kFloat), ref.sequences, combined)));
}

TEST(ProcessLogits, RefusesBadInputsAndSettings) {
  const Reference& ref = reference();
  const GenerationConfig cfg;
  EXPECT_THROW(process_logits(ref.logits[0], ref.sequences, cfg), deepspeed::Error);
  EXPECT_THROW(process_logits(ref.logits, ref.sequences.to(at::kInt), cfg), deepspeed::Error);
  EXPECT_THROW(process_logits(ref.logits, ref.sequences.narrow(0, 0, 2), cfg), deepspeed::Error);
  GenerationConfig bad;
  bad.top_p = 1.5;
  try {
    process_logits(ref.logits, ref.sequences, bad);
    ADD_FAILURE() << "top_p 1.5 was accepted";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "GenerationConfig: top_p must be in (0, 1], got 1.5");
  }
}

// `draws` tokens per row from one processed [batch, vocab] in a single call: the scores repeated down the batch.
at::Tensor draw_many(const at::Tensor& processed, const GenerationConfig& cfg, at::Generator& gen, int64_t draws) {
  return next_tokens(processed.repeat({draws, 1}), cfg, &gen).view({draws, processed.size(0)});
}

TEST(NextTokens, SameSeedSameTokensOtherSeedOthers) {
  const Reference& ref = reference();
  GenerationConfig cfg = config_of("combined_wide");
  const at::Tensor processed = process_logits(ref.logits, ref.sequences, cfg);
  cfg.seed = 1234;
  at::Generator first = make_generator(cfg, at::kCPU);
  at::Generator again = make_generator(cfg, at::kCPU);
  cfg.seed = 1235;
  at::Generator other = make_generator(cfg, at::kCPU);
  const at::Tensor a = draw_many(processed, cfg, first, 500);
  EXPECT_TRUE(at::equal(a, draw_many(processed, cfg, again, 500)));
  EXPECT_FALSE(at::equal(a, draw_many(processed, cfg, other, 500)));
  // A generator's stream moves on: the next 500 draws are not the first 500 again.
  EXPECT_FALSE(at::equal(a, draw_many(processed, cfg, first, 500)));
}

TEST(NextTokens, TopK1SamplingEqualsGreedy) {
  const Reference& ref = reference();
  GenerationConfig sample = config_of("combined");
  sample.top_k = 1;
  sample.seed = 7;
  GenerationConfig greedy = sample;
  greedy.do_sample = false;
  const at::Tensor want = next_tokens(process_logits(ref.logits, ref.sequences, greedy), greedy, nullptr);
  at::Generator gen = make_generator(sample, at::kCPU);
  const at::Tensor draws = draw_many(process_logits(ref.logits, ref.sequences, sample), sample, gen, 200);
  EXPECT_TRUE(at::equal(draws, want.unsqueeze(0).expand_as(draws)));
}

TEST(NextTokens, DrawsOnlyKeptTokensAtTheirProbabilities) {
  const Reference& ref = reference();
  GenerationConfig cfg = config_of("combined_wide");
  cfg.seed = 60;
  const at::Tensor processed = process_logits(ref.logits, ref.sequences, cfg);
  at::Generator gen = make_generator(cfg, at::kCPU);
  constexpr int64_t kDraws = 20000;
  const at::Tensor draws = draw_many(processed, cfg, gen, kDraws);  // [kDraws, 3]
  const at::Tensor probs = processed.softmax(-1).to(at::kDouble);
  for (int64_t row = 0; row < processed.size(0); ++row) {
    SCOPED_TRACE(row);
    const at::Tensor picked = processed[row].index_select(0, draws.select(1, row));
    EXPECT_TRUE(at::isfinite(picked).all().item<bool>()) << "a draw picked a filtered (-inf) token";
    // Each token's count is binomial(n, p): within 5 standard deviations (plus one draw) of n * p, which a
    // sampler drawing from the unprocessed logits, or ignoring the temperature, misses by far more here.
    const at::Tensor counts = at::bincount(draws.select(1, row), {}, processed.size(1)).to(at::kDouble);
    const at::Tensor p = probs[row];
    const at::Tensor allowed = 5 * (kDraws * p * (1 - p)).sqrt() + 1;
    EXPECT_TRUE(((counts - kDraws * p).abs() <= allowed).all().item<bool>())
        << "counts " << counts << " expected " << kDraws * p;
  }
}

at::Tensor longs(std::vector<int64_t> v) { return at::tensor(v, at::kLong); }
at::Tensor bools(std::vector<int64_t> v) { return at::tensor(v, at::kLong).to(at::kBool); }

TEST(MarkFinished, PadsFinishedRowsAndStopsOnAnyEos) {
  GenerationConfig cfg;
  cfg.eos_token_id = {5, 9};
  cfg.pad_token_id = 0;
  at::Tensor next = longs({5, 7, 3, 9});
  at::Tensor finished = bools({0, 1, 0, 0});
  mark_finished(next, finished, cfg);
  EXPECT_TRUE(at::equal(next, longs({5, 0, 3, 9})));
  EXPECT_TRUE(at::equal(finished, bools({1, 1, 0, 1})));
  // A finished row stays finished though its pad is no stop token.
  next = longs({4, 4, 4, 4});
  mark_finished(next, finished, cfg);
  EXPECT_TRUE(at::equal(next, longs({0, 0, 4, 0})));
  EXPECT_TRUE(at::equal(finished, bools({1, 1, 0, 1})));
}

TEST(MarkFinished, PadsWithTheFirstEosWithoutAPadToken) {
  GenerationConfig cfg;
  cfg.eos_token_id = {9, 5};
  at::Tensor next = longs({1, 2});
  at::Tensor finished = bools({1, 0});
  mark_finished(next, finished, cfg);
  EXPECT_TRUE(at::equal(next, longs({9, 2})));
  EXPECT_TRUE(at::equal(finished, bools({1, 0})));
}

TEST(MarkFinished, WithoutEosChangesNothing) {
  // transformers replaces tokens of finished rows only when an eos criterion exists; without one no row finishes.
  GenerationConfig cfg;
  cfg.pad_token_id = 0;
  at::Tensor next = longs({1, 2});
  at::Tensor finished = bools({1, 0});
  mark_finished(next, finished, cfg);
  EXPECT_TRUE(at::equal(next, longs({1, 2})));
  EXPECT_TRUE(at::equal(finished, bools({1, 0})));
}

TEST(MarkFinished, RefusesWrongShapesAndTypes) {
  GenerationConfig cfg;
  cfg.eos_token_id = {5};
  at::Tensor next = longs({1, 2});
  at::Tensor finished_long = longs({0, 0});
  at::Tensor finished_short = bools({0});
  EXPECT_THROW(mark_finished(next, finished_long, cfg), deepspeed::Error);
  EXPECT_THROW(mark_finished(next, finished_short, cfg), deepspeed::Error);
}

}  // namespace
