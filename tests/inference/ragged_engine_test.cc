// RaggedEngine (deepspeed/inference/ragged_engine.h) against transformers' own `generate` (ragged_reference.py) on
// the tiny Llama-family folders: seven requests of prompt lengths 1 to 30 and limits 12 to 30 (one with a repetition
// penalty, one that meets the stop token), each generated alone by transformers, and served here together and
// staggered (joining while others decode) with a token budget of 16 (prompts split into chunks: Dynamic SplitFuse),
// at most 4 sequences a pass and blocks of 4 positions (every sequence spans several blocks). A slot written to the
// wrong block, a chunk that sees past its position or another sequence's keys, or a token fed to the wrong sequence
// changes the tokens. Also: a cache too small for all at once (later requests wait), cancellation, submit's and the
// config's refusals, the config against DeepSpeed's RaggedInferenceEngineConfig, and at 2 tensor-parallel ranks
// (rank 0 schedules, rank 1 follows its plans).
#include "deepspeed/inference/ragged_engine.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/inference/generate.h"
#include "deepspeed/models/hf_checkpoint.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/tp/groups.h"
#include "hf_test_models.h"

namespace {

namespace dm = deepspeed::models;
namespace di = deepspeed::inference;
using Json = nlohmann::json;

using hf_test_models::env;
using hf_test_models::load;
using hf_test_models::world;

bool leader() { return world() == 1 || deepspeed::comm::get_rank() == 0; }

// Blocks of 4 positions, 16 tokens and 4 sequences a pass, `blocks` blocks.
di::RaggedEngineConfig small_config(int64_t blocks) {
  di::RaggedEngineConfig c;
  c.tp_size = world();
  c.kv_block_size = 4;
  c.max_ragged_batch_size = 16;
  c.max_ragged_sequence_count = 4;
  c.max_context = 64;
  c.memory_mode = "allocate";
  c.memory_size = blocks;
  return c;
}

const Json& reference_of(const std::string& model) {
  static const Json cases = [] {
    std::ifstream in(env("DS_RAGGED_REFERENCE") + "/ragged_reference.json");
    if (!in.good()) throw std::runtime_error("ctest sets DS_RAGGED_REFERENCE");
    return Json::parse(in);
  }();
  for (const auto& c : cases)
    if (c.at("model") == model) return c.at("requests");
  throw std::runtime_error("no reference for " + model);
}

di::ServeRequest request_of(const std::string& model, const Json& r) {
  di::ServeRequest s;
  s.prompt = r.at("prompt").get<std::vector<int64_t>>();
  s.generation = di::GenerationConfig::from_file(env("DS_HF_MODELS") + "/" + model + "/generation_config.json");
  s.generation.max_new_tokens = r.at("max_new_tokens").get<int64_t>();
  s.generation.max_length.reset();
  s.generation.repetition_penalty = r.at("repetition_penalty").get<double>();
  return s;
}

struct Served {
  std::vector<int64_t> tokens;
  di::FinishReason finish = di::FinishReason::kNone;
  int events_after_finish = 0;
};

// Submits requests[i] before pass arrival[i] and steps until the engine is idle; `each_step` sees the metrics after
// every pass. Other tensor-parallel ranks follow rank 0's plans instead (and get nothing back).
std::vector<Served> serve(di::RaggedEngine& engine, const std::vector<di::ServeRequest>& requests,
                          const std::vector<int>& arrival,
                          const std::function<void(const di::EngineMetrics&)>& each_step = {}) {
  std::vector<Served> out(requests.size());
  if (!leader()) {
    engine.follow();
    return out;
  }
  size_t submitted = 0;
  for (int pass = 0;; ++pass) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (arrival[i] != pass) continue;
      engine.submit(requests[i], [&out, i](const di::TokenEvent& e) {
        Served& s = out[i];
        if (s.finish != di::FinishReason::kNone) ++s.events_after_finish;
        if (e.token >= 0) s.tokens.push_back(e.token);
        s.finish = e.finish;
      });
      ++submitted;
    }
    const bool ran = engine.step();
    if (each_step) each_step(engine.metrics());
    if (!ran && submitted == requests.size()) break;
  }
  engine.stop_followers();
  return out;
}

// Every request's tokens are transformers' alone, each ending for the reason its last token gives.
void expect_reference(const std::vector<Served>& served, const Json& reference) {
  if (!leader()) return;
  for (size_t i = 0; i < served.size(); ++i) {
    const auto expected = reference[i].at("tokens").get<std::vector<int64_t>>();
    EXPECT_EQ(served[i].tokens, expected) << "request " << i;
    const bool stopped = !expected.empty() && expected.back() == 2;
    EXPECT_EQ(served[i].finish, stopped ? di::FinishReason::kStop : di::FinishReason::kLength) << "request " << i;
    EXPECT_EQ(served[i].events_after_finish, 0) << "request " << i;
  }
}

// At 2 ranks one folder per test (each collective costs a loopback round trip); Mistral's single key/value head does
// not split.
std::vector<std::string> models_at_this_world(const char* at_two_ranks) {
  if (world() > 1) return {at_two_ranks};
  return {"llama", "qwen2", "qwen3", "mistral"};
}

TEST(RaggedEngine, AllAtOnceEqualsTransformersTokenForToken) {
  for (const std::string& name : models_at_this_world("llama")) {
    SCOPED_TRACE(name);
    const Json& reference = reference_of(name);
    std::vector<di::ServeRequest> requests;
    for (const auto& r : reference) requests.push_back(request_of(name, r));
    di::RaggedEngine engine(load(name), small_config(128));
    int64_t fullest = 0;
    const auto served = serve(engine, requests, std::vector<int>(requests.size(), 0), [&](const di::EngineMetrics& m) {
      EXPECT_LE(m.batch_tokens, 16);
      EXPECT_LE(m.batch_sequences, 4);
      fullest = std::max(fullest, m.batch_tokens);
    });
    expect_reference(served, reference);
    if (!leader()) continue;
    const di::EngineMetrics m = engine.metrics();
    int64_t prompt = 0, generated = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      prompt += static_cast<int64_t>(requests[i].prompt.size());
      generated += static_cast<int64_t>(served[i].tokens.size());
    }
    EXPECT_EQ(m.prompt_tokens, prompt);
    EXPECT_EQ(m.generated_tokens, generated);
    EXPECT_EQ(m.requests_finished, static_cast<int64_t>(requests.size()));
    EXPECT_EQ(m.kv_blocks_used, 0);
    EXPECT_EQ(m.running + m.waiting, 0);
    EXPECT_EQ(fullest, 16) << "the prompts fill whole passes";
  }
}

TEST(RaggedEngine, StaggeredArrivalsEqualTransformersTokenForToken) {
  for (const std::string& name : models_at_this_world("qwen2")) {
    SCOPED_TRACE(name);
    const Json& reference = reference_of(name);
    std::vector<di::ServeRequest> requests;
    for (const auto& r : reference) requests.push_back(request_of(name, r));
    const std::vector<int> arrival = {0, 0, 3, 6, 6, 11, 17};
    di::RaggedEngine engine(load(name), small_config(128));
    expect_reference(serve(engine, requests, std::vector<int>(arrival.begin(), arrival.begin() + requests.size())),
                     reference);
  }
}

// submit and metrics from other threads while this one steps (the server's shape): the same tokens.
TEST(RaggedEngine, SubmitsFromOtherThreadsWhileStepping) {
  const Json& reference = reference_of("llama");
  di::RaggedEngine engine(load("llama"), small_config(128));
  std::vector<Served> served(reference.size());
  std::atomic<int> finished{0};
  auto submitter = [&](size_t first) {
    for (size_t i = first; i < reference.size(); i += 2) {
      engine.submit(request_of("llama", reference[i]), [&served, &finished, i](const di::TokenEvent& e) {
        served[i].tokens.push_back(e.token);
        served[i].finish = e.finish;
        if (e.finish != di::FinishReason::kNone) ++finished;
      });
      // Spaces the arrivals so that some join while others decode; the tokens do not depend on when they arrive.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      // A snapshot taken while the engine steps is whole: the cache's size, and no more blocks in use than it has.
      const di::EngineMetrics m = engine.metrics();
      EXPECT_EQ(m.kv_blocks_total, 128);
      EXPECT_LE(m.kv_blocks_used, m.kv_blocks_total);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a polling interval, not a measured time
    }
  });
  std::thread a(submitter, 0), b(submitter, 1);
  while (finished < static_cast<int>(reference.size())) {
    if (!engine.step()) std::this_thread::yield();
  }
  a.join();
  b.join();
  done = true;
  watcher.join();
  expect_reference(served, reference);
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
}

// Room for the largest request and a little more: the others wait for blocks, and get the same tokens.
TEST(RaggedEngine, ASmallCacheMakesRequestsWaitAndEveryBlockComesBack) {
  const Json& reference = reference_of("qwen2");
  std::vector<di::ServeRequest> requests;
  for (const auto& r : reference) requests.push_back(request_of("qwen2", r));
  di::RaggedEngine engine(load("qwen2"), small_config(16));  // the largest needs 13 (30 + 20 - 1 positions)
  int64_t most_waiting = 0, most_used = 0;
  const auto served = serve(engine, requests, std::vector<int>(requests.size(), 0), [&](const di::EngineMetrics& m) {
    most_waiting = std::max(most_waiting, m.waiting);
    most_used = std::max(most_used, m.kv_blocks_used);
  });
  expect_reference(served, reference);
  EXPECT_GE(most_waiting, 5);
  EXPECT_LE(most_used, 16);
  const di::EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.kv_blocks_total, 16);
  EXPECT_EQ(m.kv_blocks_used, 0);
  EXPECT_EQ(m.running + m.waiting, 0);
}

// A request cancelled from its own callback mid-decode, one cancelled while it waits for blocks, and an unknown id:
// one kCancelled event each (no token), nothing after, the others' tokens unchanged, every block back.
TEST(RaggedEngine, CancelEndsARequestAndFreesItsBlocks) {
  const Json& reference = reference_of("qwen3");
  di::RaggedEngine engine(load("qwen3"), small_config(24));
  std::map<int64_t, Served> served;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < 4; ++i) {
    auto on_event = [&served, &engine, &ids, i](const di::TokenEvent& e) {
      Served& s = served[e.request_id];
      if (s.finish != di::FinishReason::kNone) ++s.events_after_finish;
      if (e.token >= 0) s.tokens.push_back(e.token);
      s.finish = e.finish;
      if (i == 0 && s.tokens.size() == 3) engine.cancel(e.request_id);
    };
    ids.push_back(engine.submit(request_of("qwen3", reference[i]), on_event));
  }
  engine.cancel(ids[3]);  // waits: 24 blocks hold the first ones only
  engine.cancel(12345);
  while (engine.step()) {
  }
  const auto first = reference[0].at("tokens").get<std::vector<int64_t>>();
  EXPECT_EQ(served[ids[0]].tokens, std::vector<int64_t>(first.begin(), first.begin() + 3));
  EXPECT_EQ(served[ids[0]].finish, di::FinishReason::kCancelled);
  EXPECT_TRUE(served[ids[3]].tokens.empty());
  EXPECT_EQ(served[ids[3]].finish, di::FinishReason::kCancelled);
  for (size_t i = 1; i < 3; ++i)
    EXPECT_EQ(served[ids[i]].tokens, reference[i].at("tokens").get<std::vector<int64_t>>());
  for (const auto& [id, s] : served) EXPECT_EQ(s.events_after_finish, 0) << "request " << id;
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
  EXPECT_EQ(engine.metrics().requests_finished, 2);
}

// Each request draws from its own generator seeded by its config: served with others, the same tokens as generate
// draws for it alone with that seed.
TEST(RaggedEngine, SeededSamplingIsEachRequestsOwn) {
  dm::LlamaForCausalLM model = load("qwen3");
  std::vector<di::ServeRequest> requests(3);
  for (size_t i = 0; i < requests.size(); ++i) {
    for (size_t k = 0; k < 3 + 4 * i; ++k) requests[i].prompt.push_back(static_cast<int64_t>((5 + i + 7 * k) % 90 + 3));
    requests[i].generation.do_sample = true;
    requests[i].generation.temperature = 1.5;
    requests[i].generation.top_k = 0;
    requests[i].generation.max_new_tokens = 20;
    requests[i].generation.seed = 7 + i;
  }
  std::vector<std::vector<int64_t>> alone;
  for (const auto& r : requests) alone.push_back(di::generate(*model, {r.prompt}, r.generation).tokens.front());
  di::RaggedEngine engine(model, small_config(64));
  const auto served = serve(engine, requests, {0, 1, 1});
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(served[i].tokens, alone[i]) << "request " << i;
}

template <typename E, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(RaggedEngine, SubmitRefusesInOneLine) {
  di::RaggedEngineConfig c = small_config(7);
  c.max_tracked_sequences = 2;
  c.max_ragged_sequence_count = 2;
  di::RaggedEngine engine(load("mistral"), c);
  auto submit = [&](std::vector<int64_t> prompt, int64_t max_new) {
    di::ServeRequest r;
    r.prompt = std::move(prompt);
    r.generation.max_new_tokens = max_new;
    return engine.submit(r, {});
  };
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"the prompt is empty", [&] { submit({}, 4); }},
      {"prompt token 1 is 96, outside the vocabulary [0, 96)",
       [&] {
         submit({5, 96}, 4);
       }},
      {"exceeds max_context 64", [&] { submit(std::vector<int64_t>(60, 5), 8); }},
      {"exceeds the model's sliding_window 32", [&] { submit(std::vector<int64_t>(30, 5), 8); }},
      {"needs 8 KV blocks, the cache holds 7", [&] { submit(std::vector<int64_t>(20, 5), 13); }},
  };
  for (const auto& [expected, f] : cases) {
    const std::string what = message_of<std::invalid_argument>(f);
    EXPECT_NE(what.find(expected), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  submit({5}, 2);
  submit({6}, 2);
  EXPECT_NE(message_of<std::invalid_argument>([&] { submit({7}, 2); }).find("max_tracked_sequences (2)"),
            std::string::npos);
  di::ServeRequest bad;
  bad.prompt = {5};
  bad.generation.do_sample = true;
  bad.generation.top_p = 2.0;
  EXPECT_NE(message_of<deepspeed::ConfigError>([&] { engine.submit(bad, {}); }).find("top_p"), std::string::npos);
  while (engine.step()) {
  }
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
}

TEST(RaggedEngineConfig, ReadsWhatDeepSpeedReads) {
  std::ifstream in(env("DS_RAGGED_REFERENCE") + "/ragged_configs.json");
  ASSERT_TRUE(in.good()) << "ctest sets DS_RAGGED_REFERENCE";
  const Json cases = Json::parse(in);
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c.at("config").dump();
    SCOPED_TRACE(text);
    const Json& ds = c.at("deepspeed");
    if (ds.is_null()) {
      EXPECT_THROW(di::RaggedEngineConfig::from_json(text, "serve.json"), deepspeed::ConfigError);
      continue;
    }
    const di::RaggedEngineConfig ours = di::RaggedEngineConfig::from_json(text, "serve.json");
    EXPECT_EQ(ours.tp_size, ds.at("tp_size").get<int>());
    EXPECT_EQ(ours.max_tracked_sequences, ds.at("max_tracked_sequences").get<int64_t>());
    EXPECT_EQ(ours.max_ragged_batch_size, ds.at("max_ragged_batch_size").get<int64_t>());
    EXPECT_EQ(ours.max_ragged_sequence_count, ds.at("max_ragged_sequence_count").get<int64_t>());
    EXPECT_EQ(ours.max_context, ds.at("max_context").get<int64_t>());
    EXPECT_EQ(ours.memory_mode, ds.at("mode").get<std::string>());
    EXPECT_EQ(ours.memory_size, ds.at("size").get<int64_t>());
  }
}

TEST(RaggedEngineConfig, RefusesByNameInOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"state_manager": {"bogus": 1}})", "serve.json: unknown key state_manager.bogus"},
      {R"({"state_manager": {"memory_config": {"mode": "borrow"}}})", "state_manager.memory_config.mode must be"},
      {R"({"state_manager": {"offload": true}})", "state_manager.offload true is not implemented"},
      {R"({"quantization": {"quantization_mode": "wf6af16"}})", "quantization.quantization_mode \"wf6af16\""},
      {R"({"kv_block_size": 0})", "kv_block_size must be >= 1, got 0"},
      {R"({"dtype": "int4"})", "dtype must be fp32, fp16 or bf16"},
      {R"({"tp": {"tp_size": 2}, "tensor_parallel": {"tp_size": 2}})", "tensor_parallel is given twice"},
      {R"({"state_manager": {"max_context": "12"}})", "state_manager.max_context must be an integer"},
      {R"([1])", "serve.json: not a JSON object"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string what =
        message_of<deepspeed::ConfigError>([&] { di::RaggedEngineConfig::from_json(text, "serve.json"); });
    EXPECT_NE(what.find(expected), std::string::npos) << text << " -> " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  const di::RaggedEngineConfig c = di::RaggedEngineConfig::from_json(R"({"kv_block_size": 16, "dtype": "bf16"})");
  EXPECT_EQ(c.kv_block_size, 16);
  EXPECT_EQ(c.dtype, c10::ScalarType::BFloat16);
  EXPECT_THROW(di::RaggedEngineConfig::from_file("/nonexistent/serve.json"), deepspeed::ConfigError);
}

// "reserve": all memory but `size` bytes, capped by max_tracked_sequences x max_context; more kept than there is:
// refused naming the key.
TEST(RaggedEngineConfig, ReserveSizesTheCacheFromMemory) {
  di::RaggedEngineConfig c = small_config(0);
  c.memory_mode = "reserve";
  c.memory_size = 1;
  c.max_tracked_sequences = 4;
  c.max_ragged_sequence_count = 4;
  EXPECT_EQ(di::RaggedEngine(load("llama"), c).metrics().kv_blocks_total, 4 * 64 / 4);
  c.memory_size = int64_t{1} << 60;
  const std::string what = message_of<deepspeed::ConfigError>([&] { di::RaggedEngine(load("llama"), c); });
  EXPECT_NE(what.find("state_manager.memory_config.size"), std::string::npos) << what;
}

}  // namespace
