// PipelineModule (deepspeed/pipe/module.h) in one process: every stage of a split is built with the
// (options, num_stages, stage_id) constructor, and the stages run one after another must be the
// unsplit model exactly (same parameters, same outputs, same gradients). Also the GPT pipeline
// layers (models/gpt_pipe.h) against models::GPT.
#include "deepspeed/pipe/module.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/error.h"
#include "deepspeed/pipe/engine.h"
#include "gpt.h"
#include "gpt_pipe.h"
#include "gpt_pipeline_names.h"
#include "tiny_gpt.h"

namespace {

namespace dsp = deepspeed::pipe;
using deepspeed::Error;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr uint64_t kSeed = 1234;

// How often each layer's builder ran, and how often the function layers ran.
struct Counters {
  std::vector<int> builds = std::vector<int>(7, 0);
  int function_calls = 0;
};

// 7 layers on [batch, 4]: tied "tie" Linear(4,4) (its own forward), Linear(4,8), relu, Linear(8,8),
// tanh, Linear(8,4), tied "tie" again as x @ weight^T (no bias).
std::vector<dsp::LayerSpec> toy_layers(const std::shared_ptr<Counters>& counters,
                                       std::vector<std::string> tied_attr = {"weight"}) {
  auto linear = [counters](int index, int64_t in, int64_t out) {
    return [counters, index, in, out] {
      ++counters->builds[static_cast<size_t>(index)];
      return torch::nn::AnyModule(torch::nn::Linear(in, out));
    };
  };
  auto fn = [counters](at::Tensor (*f)(const at::Tensor&)) {
    return [counters, f](const at::Tensor& x) {
      ++counters->function_calls;
      return f(x);
    };
  };
  return {dsp::TiedLayerSpec("tie", "Linear", linear(0, 4, 4), nullptr, tied_attr),
          dsp::LayerSpec("Linear", linear(1, 4, 8)),
          dsp::LayerSpec::function("ReLU", fn([](const at::Tensor& x) { return at::relu(x); })),
          dsp::LayerSpec("Linear", linear(3, 8, 8)),
          dsp::LayerSpec::function("Tanh", fn([](const at::Tensor& x) { return at::tanh(x); })),
          dsp::LayerSpec("Linear", linear(5, 8, 4)),
          dsp::TiedLayerSpec(
              "tie", "Linear", linear(6, 4, 4),
              [](torch::nn::Module& m, const at::Tensor& x) {
                return x.matmul(m.named_parameters()["weight"].t());
              },
              tied_attr)};
}

dsp::PipelineModuleOptions toy_options(const std::shared_ptr<Counters>& counters,
                                       const std::string& method) {
  dsp::PipelineModuleOptions o;
  o.layers = toy_layers(counters);
  o.partition_method = method;
  o.base_seed = kSeed;
  return o;
}

std::vector<dsp::PipelineModule> build_stages(const dsp::PipelineModuleOptions& o, int num_stages) {
  std::vector<dsp::PipelineModule> stages;
  for (int s = 0; s < num_stages; ++s) stages.emplace_back(o, num_stages, s);
  return stages;
}

at::Tensor run_stages(std::vector<dsp::PipelineModule>& stages, at::Tensor x) {
  for (auto& stage : stages) x = stage->forward(x);
  return x;
}

std::map<std::string, at::Tensor> params_of(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m.named_parameters()) out.emplace(item.key(), item.value());
  return out;
}

TEST(PipelineModule, SplitsRunAsTheWholeModel) {
  auto counters = std::make_shared<Counters>();
  for (const std::string method : {"uniform", "parameters", "0,2,7", "0,1,6,7"}) {
    SCOPED_TRACE(method);
    const dsp::PipelineModuleOptions o = toy_options(counters, method);
    auto whole = build_stages(toy_options(counters, "uniform"), 1);
    const at::Tensor x = at::randn({3, 4});
    const at::Tensor expected = run_stages(whole, x);
    const auto whole_params = params_of(*whole[0]);
    for (int num_stages : {2, 3}) {
      const auto commas = std::count(method.begin(), method.end(), ',');
      if (commas != 0 && commas != num_stages)
        continue;  // explicit boundaries are for one stage count
      SCOPED_TRACE(num_stages);
      auto stages = build_stages(o, num_stages);
      EXPECT_TRUE(at::equal(run_stages(stages, x), expected));
      // The union of the stages' parameters is the whole model's, name for name and value for
      // value; a tied module on several stages has the same values on each.
      std::set<std::string> names;
      for (auto& stage : stages) {
        EXPECT_EQ(stage->num_stages(), num_stages);
        for (const auto& [name, p] : params_of(*stage)) {
          names.insert(name);
          ASSERT_TRUE(whole_params.count(name)) << name;
          EXPECT_TRUE(at::equal(p, whole_params.at(name))) << name;
        }
      }
      EXPECT_EQ(names.size(), whole_params.size());
    }
  }
}

TEST(PipelineModule, NamesFollowDeepSpeed) {
  auto counters = std::make_shared<Counters>();
  dsp::PipelineModule whole(toy_options(counters, "uniform"), 1, 0);
  std::set<std::string> names;
  for (const auto& item : whole->named_parameters()) names.insert(item.key());
  EXPECT_EQ(names,
            (std::set<std::string>{"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias",
                                   "tied_modules.tie.weight", "tied_modules.tie.bias"}));
  EXPECT_EQ(whole->layer(1)->named_parameters()["weight"].size(1), 4);
  EXPECT_EQ(whole->layer(2), nullptr);  // a function
  EXPECT_EQ(whole->layer(0), nullptr);  // tied: under tied_modules
  EXPECT_THAT([&] { whole->layer(7); },
              ThrowsMessage<Error>(HasSubstr("layer 7 is not on stage 0 (layers 0-6)")));
}

TEST(PipelineModule, BuildsOnlyItsOwnLayers) {
  auto counters = std::make_shared<Counters>();
  const dsp::PipelineModuleOptions o = toy_options(counters, "uniform");  // 0,3,5,7 for 3 stages
  const std::vector<std::vector<int>> expected{
      {1, 1, 0, 0, 0, 0, 0}, {0, 0, 0, 1, 0, 0, 0}, {0, 0, 0, 0, 0, 1, 1}};
  for (int s = 0; s < 3; ++s) {
    counters->builds.assign(7, 0);
    dsp::PipelineModule stage(o, 3, s);
    EXPECT_EQ(stage->parts(), (dsp::Partition{0, 3, 5, 7}));
    EXPECT_EQ(stage->stage_id(), s);
    EXPECT_EQ(stage->local_stop() - stage->local_start(), s == 0 ? 3 : 2);
    EXPECT_EQ(counters->builds, expected[static_cast<size_t>(s)]) << "stage " << s;
  }
  // The whole model builds the tied module once, at its first occurrence.
  counters->builds.assign(7, 0);
  dsp::PipelineModule whole(o, 1, 0);
  EXPECT_EQ(counters->builds, (std::vector<int>{1, 1, 0, 1, 0, 1, 0}));
}

TEST(PipelineModule, TiedModules) {
  auto counters = std::make_shared<Counters>();
  auto stages = build_stages(toy_options(counters, "uniform"), 3);
  EXPECT_EQ(stages[0]->tied_stages("tie"), (std::vector<int>{0, 2}));
  EXPECT_EQ(stages[1]->tied_stages("tie"), (std::vector<int>{0, 2}));
  EXPECT_TRUE(stages[0]->tied_stages("other").empty());
  EXPECT_EQ(stages[0]->tied_keys(), (std::vector<std::string>{"tie"}));
  EXPECT_TRUE(stages[1]->tied_keys().empty());
  // Built on stage 2 at layer 6, seeded as layer 0: the same initial values as stage 0's.
  const auto first = stages[0]->tied_parameters("tie");
  const auto last = stages[2]->tied_parameters("tie");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_TRUE(at::equal(first[0], last[0]));
  EXPECT_TRUE(first[0].is_same(stages[0]->named_parameters()["tied_modules.tie.weight"]));
  EXPECT_THAT([&] { stages[1]->tied_parameters("tie"); },
              ThrowsMessage<Error>(HasSubstr("stage 1 holds no tied module \"tie\"")));

  dsp::PipelineModuleOptions bad = toy_options(counters, "uniform");
  bad.layers = toy_layers(counters, {"weight", "scale"});
  dsp::PipelineModule bad_whole(bad, 1, 0);
  EXPECT_THAT([&] { bad_whole->tied_parameters("tie"); },
              ThrowsMessage<Error>(HasSubstr("tied module \"tie\" has no parameter \"scale\"")));
  // One stage: the key's module is used at both ends, so its weight gets both uses' gradients.
  dsp::PipelineModule whole(toy_options(counters, "uniform"), 1, 0);
  whole->forward(at::randn({2, 4})).sum().backward();
  EXPECT_TRUE(whole->tied_parameters("tie")[0].grad().defined());
}

TEST(PipelineModule, ActivationCheckpointingGivesTheSameGradients) {
  auto counters = std::make_shared<Counters>();
  const at::Tensor x = at::randn({3, 4});
  std::map<std::string, at::Tensor> grads[2];
  at::Tensor input_grads[2];
  int calls[2];
  for (int interval : {0, 2}) {
    dsp::PipelineModuleOptions o = toy_options(counters, "uniform");
    o.activation_checkpoint_interval = interval;
    dsp::PipelineModule m(o, 1, 0);
    m->train();
    at::Tensor in = x.clone().requires_grad_(true);
    counters->function_calls = 0;
    m->forward(in).pow(2).sum().backward();
    const int i = interval == 0 ? 0 : 1;
    calls[i] = counters->function_calls;
    input_grads[i] = in.grad();
    for (const auto& [name, p] : params_of(*m)) grads[i][name] = p.grad();
  }
  // Checkpointed segments run again in backward: the two function layers twice each.
  EXPECT_EQ(calls[0], 2);
  EXPECT_EQ(calls[1], 4);
  EXPECT_TRUE(at::equal(input_grads[0], input_grads[1]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (const auto& [name, g] : grads[0]) {
    ASSERT_TRUE(g.defined()) << name;
    EXPECT_TRUE(at::equal(g, grads[1].at(name))) << name;
  }
  // Not while evaluating.
  dsp::PipelineModuleOptions o = toy_options(counters, "uniform");
  o.activation_checkpoint_interval = 2;
  dsp::PipelineModule m(o, 1, 0);
  m->eval();
  counters->function_calls = 0;
  m->forward(x.clone().requires_grad_(true)).sum().backward();
  EXPECT_EQ(counters->function_calls, 2);
}

TEST(PipelineModule, ConstructorErrors) {
  auto counters = std::make_shared<Counters>();
  EXPECT_THAT([&] { dsp::PipelineModule m(toy_options(counters, "uniform"), 2, 2); },
              ThrowsMessage<Error>(HasSubstr("stage 2 of 2 stages does not exist")));
  EXPECT_THAT([&] { dsp::PipelineModule m(toy_options(counters, "uniform"), 8, 0); },
              ThrowsMessage<Error>(HasSubstr("7 layers cannot fill 8 stages")));
  dsp::PipelineModuleOptions no_loss = toy_options(counters, "uniform");
  dsp::PipelineModule m(no_loss, 1, 0);
  EXPECT_THAT([&] { m->loss(at::zeros({1}), at::zeros({1})); },
              ThrowsMessage<Error>(HasSubstr("no loss_fn")));
}

// The deepspeed::comm constructor in a single-process world: the stage comes from the global rank,
// and the partition is printed on rank 0; pipe::initialize checks the config against its topology.
TEST(PipelineModule, FromTheWorld) {
  const bool started_here = !deepspeed::comm::is_initialized();
  if (started_here) deepspeed::comm::init_distributed();
  auto counters = std::make_shared<Counters>();
  dsp::PipelineModuleOptions o = toy_options(counters, "uniform");
  o.num_stages = 1;
  ::testing::internal::CaptureStdout();
  dsp::PipelineModule m(o);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(m->num_stages(), 1);
  EXPECT_EQ(m->stage_id(), 0);
  EXPECT_EQ(m->topology().world_size(), 1);
  EXPECT_THAT(
      printed,
      HasSubstr("stage 0: layers 0-6 (Linear, Linear, ReLU, Linear, Tanh, Linear, Linear)"));

  o.num_stages = 2;
  EXPECT_THAT(
      [&] { dsp::PipelineModule bad(o); },
      ThrowsMessage<Error>(HasSubstr("pipeline: world size 1 is not divisible by num_stages 2")));
  o.topology = dsp::PipeDataParallelTopology(1, 1);
  EXPECT_THAT([&] { dsp::PipelineModule bad(o); },
              ThrowsMessage<Error>(HasSubstr("give exactly one of num_stages and topology")));
  o.num_stages = 0;
  o.topology = dsp::ProcessTopology({"data"}, {1});
  EXPECT_THAT([&] { dsp::PipelineModule bad(o); },
              ThrowsMessage<Error>(HasSubstr("has no \"pipe\" axis")));
  o.topology = dsp::PipeDataParallelTopology(1, 2);
  EXPECT_THAT([&] { dsp::PipelineModule bad(o); },
              ThrowsMessage<Error>(HasSubstr("has 2 ranks but the world has 1")));
  o.topology = dsp::PipeDataParallelTopology(1, 1);
  ::testing::internal::CaptureStdout();
  dsp::PipelineModule from_topology(o);
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(from_topology->parts(), (dsp::Partition{0, 7}));

  // pipe::initialize refuses, by key and before it builds anything, a config or options that contradict the
  // module's topology (config::initialize_rules, phase kPipeline), and builds from a config that agrees.
  const std::string base = R"({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, )"
                           R"("optimizer": {"type": "SGD", "params": {"lr": 0.1}})";
  auto refusal = [&](const std::string& extra, deepspeed::InitializeOptions options = {}) {
    try {
      dsp::initialize(m, deepspeed::Config::from_string(base + extra + "}"), std::move(options));
    } catch (const deepspeed::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(refusal(R"(, "pipeline": {"stages": 2})"), "pipeline.stages 2 differs from the PipelineModule's 1 stages");
  EXPECT_THAT(refusal(R"(, "tensor_parallel": {"tp_overlap_comm": true})"),
              HasSubstr("tensor_parallel.tp_overlap_comm overlaps the tensor-parallel all-reduces"));
  deepspeed::InitializeOptions caller;
  caller.data_parallel_group = deepspeed::comm::get_world_group();
  EXPECT_EQ(refusal("", std::move(caller)),
            "pipe::initialize: the pipeline engine builds its own data- and model-parallel groups");
  EXPECT_EQ(refusal(R"(, "pipeline": {"stages": 1})"), "(accepted)");
  if (started_here) deepspeed::comm::destroy_process_group();
}

// GPT as pipeline layers.

// The shared tiny GPT (tests/common/tiny_gpt.h) with the head tied or not.
deepspeed::models::GPTConfig tiny_gpt(bool tied_head) {
  deepspeed::models::GPTConfig cfg = tiny_gpt::config();
  cfg.tied_head = tied_head;
  return cfg;
}

using gpt_pipeline_names::gpt_name;

TEST(GPTPipelineLayers, OneStageMatchesGPTBitForBit) {
  for (bool tied_head : {true, false}) {
    SCOPED_TRACE(tied_head ? "tied head" : "untied head");
    const auto cfg = tiny_gpt(tied_head);
    at::manual_seed(5);
    deepspeed::models::GPT gpt(cfg);
    dsp::PipelineModuleOptions o;
    o.layers = deepspeed::models::gpt_pipeline_layers(cfg);
    o.loss_fn = deepspeed::models::gpt_pipeline_loss;
    dsp::PipelineModule pipe(o, 1, 0);
    EXPECT_EQ(o.layers.size(), static_cast<size_t>(cfg.layers + 3));

    // Copy GPT's values in by name: every parameter of each model has its counterpart.
    const auto gpt_params = params_of(*gpt);
    const auto pipe_params = params_of(*pipe);
    ASSERT_EQ(pipe_params.size(), gpt_params.size());
    {
      at::NoGradGuard no_grad;
      for (const auto& [name, p] : pipe_params) {
        const std::string g = gpt_name(name, cfg.layers);
        ASSERT_TRUE(gpt_params.count(g)) << name << " -> " << g;
        p.copy_(gpt_params.at(g));
      }
    }
    const at::Tensor tokens = at::randint(cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
    const at::Tensor targets = at::randint(cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
    const at::Tensor expected = gpt->forward(tokens, targets);
    const at::Tensor loss = pipe->loss(pipe->forward(tokens), targets);
    EXPECT_TRUE(at::equal(loss, expected))
        << loss.item<float>() << " vs " << expected.item<float>();
    expected.backward();
    loss.backward();
    for (const auto& [name, p] : pipe_params) {
      const at::Tensor& g = gpt_params.at(gpt_name(name, cfg.layers)).grad();
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_TRUE(at::equal(p.grad(), g)) << name;
    }
  }
}

TEST(GPTPipelineLayers, StagesChainToTheWholeModelAndShareTheEmbedding) {
  const auto cfg = tiny_gpt(/*tied_head=*/true);
  dsp::PipelineModuleOptions o;
  o.layers = deepspeed::models::gpt_pipeline_layers(cfg);
  o.base_seed = kSeed;
  auto whole = build_stages(o, 1);
  auto stages = build_stages(o, 2);
  const at::Tensor tokens = at::randint(cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  EXPECT_TRUE(at::equal(run_stages(stages, tokens), run_stages(whole, tokens)));
  EXPECT_EQ(stages[0]->tied_stages("embed"), (std::vector<int>{0, 1}));
  const auto first = stages[0]->tied_parameters("embed");
  const auto last = stages[1]->tied_parameters("embed");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].sizes().vec(), (std::vector<int64_t>{cfg.vocab_size, cfg.hidden}));
  EXPECT_TRUE(at::equal(first[0], last[0]));
  // GPT's init: N(0, 0.02) embedding, LayerNorm weight 1.
  EXPECT_NEAR(first[0].std().item<double>(), 0.02, 0.005);
  EXPECT_TRUE(at::equal(whole[0]->named_parameters()[std::to_string(cfg.layers + 1) + ".weight"],
                        at::ones({cfg.hidden})));
}

// GPTConfig::init_seed: every stage of every split holds the values models::GPT of the same config starts from, bit
// for bit (tied copies included), whatever the global generator and PipelineModule's base_seed say: the pipeline and
// the plain engine then train one model. Without init_seed the layers draw from the global generator and differ.
TEST(GPTPipelineLayers, InitSeedBuildsTheGPTsValuesAtEveryStageCount) {
  for (bool tied_head : {true, false}) {
    SCOPED_TRACE(tied_head ? "tied head" : "untied head");
    auto cfg = tiny_gpt(tied_head);
    cfg.layers = 3;  // 6 pipeline layers: splits into 1, 2, 3 and 6 stages
    cfg.init_seed = kSeed;
    at::manual_seed(1);
    deepspeed::models::GPT gpt(cfg);
    const auto gpt_params = params_of(*gpt);
    for (int num_stages : {1, 2, 3, 6}) {
      SCOPED_TRACE(num_stages);
      at::manual_seed(static_cast<uint64_t>(100 + num_stages));  // another global state each time
      dsp::PipelineModuleOptions o;
      o.layers = deepspeed::models::gpt_pipeline_layers(cfg);
      o.base_seed = 7 + num_stages;
      size_t seen = 0;
      std::set<std::string> names;
      for (auto& stage : build_stages(o, num_stages)) {
        for (const auto& [name, p] : params_of(*stage)) {
          const std::string g = gpt_name(name, cfg.layers);
          ASSERT_TRUE(gpt_params.count(g)) << name << " -> " << g;
          EXPECT_TRUE(at::equal(p, gpt_params.at(g))) << name << " differs from GPT's " << g;
          names.insert(g);
          ++seen;
        }
      }
      EXPECT_EQ(names.size(), gpt_params.size()) << "every GPT parameter is on some stage";
      EXPECT_GE(seen, gpt_params.size());
    }
  }
  // The control: the same layers without init_seed start elsewhere (the test above can fail).
  auto cfg = tiny_gpt(/*tied_head=*/true);
  at::manual_seed(1);
  cfg.init_seed = kSeed;
  deepspeed::models::GPT gpt(cfg);
  cfg.init_seed.reset();
  dsp::PipelineModuleOptions o;
  o.layers = deepspeed::models::gpt_pipeline_layers(cfg);
  o.base_seed = kSeed;
  auto whole = build_stages(o, 1);
  EXPECT_FALSE(at::equal(params_of(*whole[0]).at("1.attn.qkv.weight"),
                         params_of(*gpt).at("blocks.0.attn.qkv.weight")));
}

// GPT's own init with init_seed does not depend on the global generator, and differs with the seed.
TEST(GPTPipelineLayers, InitSeedMakesGPTIndependentOfTheGlobalGenerator) {
  auto cfg = tiny_gpt(/*tied_head=*/false);
  cfg.init_seed = kSeed;
  at::manual_seed(1);
  deepspeed::models::GPT a(cfg);
  at::manual_seed(2);
  deepspeed::models::GPT b(cfg);
  cfg.init_seed = kSeed + 1;
  deepspeed::models::GPT c(cfg);
  const auto pa = params_of(*a), pb = params_of(*b), pc = params_of(*c);
  for (const auto& [name, p] : pa) EXPECT_TRUE(at::equal(p, pb.at(name))) << name;
  EXPECT_FALSE(at::equal(pa.at("wte.weight"), pc.at("wte.weight")));
  EXPECT_FALSE(at::equal(pa.at("lm_head.weight"), pc.at("lm_head.weight")));
}

}  // namespace
