// Engine::save_checkpoint / load_checkpoint at 1-4 ranks: resuming is bit-exact at every ZeRO stage
// (fp32, bf16, CPU offload), a checkpoint of one stage loads into another, the files follow
// DeepSpeed's layout and the fp32 contract (ds_to_fp32 reproduces the trained weights), and broken
// checkpoints (a flipped byte included) are refused with the file named while the engine keeps its
// state; a resume at another global batch keeps the samples consumed; a save removes what killed
// saves left.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/optim/adam.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "elementwise_net.h"
#include "safetensors_reader.h"
#include "shared_temp_dir.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace ckpt = deepspeed::checkpoint;
namespace fs = std::filesystem;

namespace {

using ds_test::SharedTempDir;

void barrier() { deepspeed::comm::get_world_group().barrier(); }
int rank() { return deepspeed::comm::get_rank(); }

// Stage, gradient accumulation, clipping, a warmup schedule and AdamW: every piece of state a
// resume must restore.
constexpr const char* kAdamW = "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.1}}";

std::string config_json(int stage, const std::string& zero_extra = "",
                        const std::string& top_extra = "", const std::string& optimizer = kAdamW) {
  return "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2, "
         "\"steps_per_print\": 1000,"
         " \"gradient_clipping\": 1.0,"
         " \"optimizer\": " + optimizer + ","
         " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, "
         "\"warmup_max_lr\": 0.003,"
         " \"warmup_num_steps\": 3}}," +
         top_extra + " \"zero_optimization\": {\"stage\": " + std::to_string(stage) +
         (stage == 3 ? ", \"stage3_param_persistence_threshold\": 64" : "") + zero_extra + "}}";
}

deepspeed::models::GPTConfig model_config() {
  auto c = tiny_gpt::config(
      /*uneven=*/true);   // no flat buffer splits evenly: partitions straddle parameters
  c.shard_blocks = true;  // units at stage 3, plain blocks otherwise
  return c;
}

std::vector<at::Tensor> full_params(const deepspeed::models::GPT& model) {
  deepspeed::zero::GatheredParameters gathered(*model);
  return tiny_gpt::snapshot(model);
}

void expect_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(at::equal(got[i], want[i])) << what << ": parameter " << i;
}

struct Case {
  int stage;
  std::string zero_extra, top_extra, name;
};

// ZeRO-Infinity: masters and Adam states in swap files under $TMPDIR (one directory per test run:
// concurrent runs use other ports), streamed in pieces.
std::string nvme_offload() {
  const char* port = std::getenv("MASTER_PORT");
  const auto dir =
      fs::temp_directory_path() / ("ds_engine_ckpt_nvme_" + std::string(port ? port : "0"));
  return ", \"sub_group_size\": 2000, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
         "\"" +
         dir.string() + "\"}";
}

// ZeRO-Infinity's parameter offload: unit partitions in swap files (with cpu optimizer offload).
std::string param_offload() {
  const char* port = std::getenv("MASTER_PORT");
  const auto dir =
      fs::temp_directory_path() / ("ds_engine_ckpt_nvme_" + std::string(port ? port : "0"));
  return ", \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": "
         "\"nvme\", \"max_in_cpu\": 0, "
         "\"nvme_path\": \"" +
         dir.string() + "\"}";
}

// ZeRO-Infinity with both swapped: parameters and optimizer state in files.
std::string infinity_offload() {
  const char* port = std::getenv("MASTER_PORT");
  const auto dir = fs::temp_directory_path() / ("ds_engine_ckpt_infinity_" + std::string(port ? port : "0"));
  return ", \"sub_group_size\": 2000, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
         dir.string() + "\"}, \"offload_param\": {\"device\": \"nvme\", \"max_in_cpu\": 0, \"nvme_path\": \"" + dir.string() + "\"}";
}

const std::vector<Case>& resume_cases() {
  static const std::vector<Case> cases = {
      {0, "", "", "stage 0"},
      {1, "", "", "stage 1"},
      {2, "", "", "stage 2"},
      {3, "", "", "stage 3"},
      {2, "", "\"bf16\": {\"enabled\": true},", "stage 2 bf16"},
      {3, "", "\"bf16\": {\"enabled\": true},", "stage 3 bf16"},
      {1, ", \"offload_optimizer\": {\"device\": \"cpu\"}", "\"bf16\": {\"enabled\": true},",
       "stage 1 bf16 offload"},
      {3, ", \"offload_optimizer\": {\"device\": \"cpu\"}", "", "stage 3 offload"},
      {2, nvme_offload(), "\"bf16\": {\"enabled\": true},", "stage 2 bf16 nvme offload"},
      {3, nvme_offload(), "", "stage 3 nvme offload"},
      {3, param_offload(), "", "stage 3 offload_param nvme"},
      {3, infinity_offload(), "\"bf16\": {\"enabled\": true},", "stage 3 bf16 offload_param + offload_optimizer nvme"},
  };
  return cases;
}

// Four steps straight against two, a save, and a fresh engine that loads and runs the other two: losses, parameters,
// step count and learning rate all equal.
void expect_resume_is_bit_exact(const deepspeed::Config& cfg) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  {
    SharedTempDir dir;
    // Reference: four steps straight. (Each engine is gone before the next is built: nvme offload's
    // swap files are named by rank.)
    std::vector<double> ref_losses, ref_lr;
    std::vector<at::Tensor> want;
    {
      auto ref_model = tiny_gpt::make_model(c);
      auto ref = deepspeed::initialize(ref_model, cfg);
      ref_losses = tiny_gpt::train(ref, data, 4);
      want = full_params(ref_model);
      ref_lr = ref.get_lr();
    }
    // Two steps, save; a fresh engine loads and runs the other two.
    {
      auto model = tiny_gpt::make_model(c);
      auto engine = deepspeed::initialize(model, cfg);
      tiny_gpt::train(engine, data, 2);
      EXPECT_EQ(engine.save_checkpoint(dir.path()), "global_step2");
    }
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, cfg);
    auto loaded = engine.load_checkpoint(dir.path());
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->path, dir.path() + "/global_step2");
    EXPECT_EQ(engine.global_steps(), 2);
    const auto losses = tiny_gpt::train(engine, data, 2, /*first_step=*/2);
    ASSERT_EQ(losses.size() * 2, ref_losses.size());
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_EQ(losses[i], ref_losses[losses.size() + i])
          << "micro-batch " << i << " after the resume";
    expect_equal(full_params(model), want, "parameters after the resumed steps");
    EXPECT_EQ(engine.global_steps(), 4);
    EXPECT_EQ(engine.get_lr(), ref_lr);
  }
}

TEST(EngineCheckpoint, ResumeIsBitExactAtEveryStage) {
  for (const Case& k : resume_cases()) {
    SCOPED_TRACE(k.name);
    expect_resume_is_bit_exact(deepspeed::Config::from_string(config_json(k.stage, k.zero_extra, k.top_extra)));
  }
  barrier();
  std::error_code ec;
  if (rank() == 0)
    fs::remove_all(fs::temp_directory_path() /
                       ("ds_engine_ckpt_nvme_" +
                        std::string(std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "0")),
                   ec);
}

// Lamb's moments and step count come back whole, at stage 0 and where ZeRO partitions cut its tensors (its trust
// ratio reads every rank's pieces).
TEST(EngineCheckpoint, LambResumeIsBitExact) {
  const std::string lamb = "{\"type\": \"Lamb\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}}";
  for (int stage : {0, 1, 3}) {
    SCOPED_TRACE("lamb stage " + std::to_string(stage));
    expect_resume_is_bit_exact(deepspeed::Config::from_string(config_json(stage, "", "", lamb)));
  }
}

// Muon's momentum (saved as exp_avg) and its auxiliary Adam's moments come back whole: at stage 0 and where ZeRO
// partitions cut its matrices (each rank's Newton-Schulz reads the whole update, put together from every rank's
// pieces); config_json's WarmupLR drives both halves' learning rates.
TEST(EngineCheckpoint, MuonResumeIsBitExact) {
  const std::string muon = "{\"type\": \"Muon\", \"params\": {\"weight_decay\": 0.01}}";
  for (int stage : {0, 2, 3}) {
    SCOPED_TRACE("muon stage " + std::to_string(stage));
    expect_resume_is_bit_exact(deepspeed::Config::from_string(config_json(stage, "", "", muon)));
  }
}

// offload_optimizer.overlap_step: a save lands the step in flight, so the checkpoint holds it and the run that saved
// continues from the landed parameters; a fresh engine that loads it continues identically (losses, parameters,
// learning rate), at stages 1-3, fp32 and bf16 (bf16 parameters are written from the masters when the step lands).
TEST(EngineCheckpoint, OverlappedStepResumesAsTheRunThatSaved) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  const std::string overlap = ", \"offload_optimizer\": {\"device\": \"cpu\", \"overlap_step\": true}";
  for (const auto& [stage, top] : std::vector<std::pair<int, std::string>>{
           {1, ""}, {2, "\"bf16\": {\"enabled\": true},"}, {3, ""}, {3, "\"bf16\": {\"enabled\": true},"}}) {
    SCOPED_TRACE("stage " + std::to_string(stage) + " " + top);
    SharedTempDir dir;
    const auto cfg = deepspeed::Config::from_string(config_json(stage, overlap, top));
    std::vector<double> want_losses, want_lr;
    std::vector<at::Tensor> want;
    {
      auto model = tiny_gpt::make_model(c);
      auto engine = deepspeed::initialize(model, cfg);
      tiny_gpt::train(engine, data, 2);
      engine.save_checkpoint(dir.path());
      want_losses = tiny_gpt::train(engine, data, 2, /*first_step=*/2);
      want = full_params(model);
      want_lr = engine.get_lr();
    }
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, cfg);
    ASSERT_TRUE(engine.load_checkpoint(dir.path()).has_value());
    const auto losses = tiny_gpt::train(engine, data, 2, /*first_step=*/2);
    EXPECT_EQ(losses, want_losses);
    expect_equal(full_params(model), want, "parameters after the resumed steps");
    EXPECT_EQ(engine.get_lr(), want_lr);
  }
}

// fp16: the loss scale, its hysteresis and window position and the skipped-step count come back, so
// a resumed run skips and grows the scale on the same steps. SGD with momentum: its momentum buffer
// is the optimizer state.
// Steps [first, last) of an elementwise_net engine on each rank's batches; `poison` may change a step's input.
void train_elementwise(deepspeed::Engine& engine, int first, int last,
                       const std::function<void(int step, at::Tensor& x)>& poison) {
  for (int step = first; step < last; ++step) {
    at::Tensor t;
    at::Tensor x = elementwise_net::batch_for(rank(), step, &t);
    if (poison) poison(step, x);
    engine.backward(engine.forward(x.to(engine.device()), t.to(engine.device())));
    engine.step();
  }
}

TEST(EngineCheckpoint, Fp16ResumeRestoresTheLossScaler) {
  using elementwise_net::ElementwiseNet;
  tiny_gpt::ensure_comm();
  const int poisoned = deepspeed::comm::get_world_size() - 1;
  auto run = [&](deepspeed::Engine& engine, int first, int last) {
    train_elementwise(engine, first, last, [&](int step, at::Tensor& x) {
      if ((step == 1 || step == 4) && rank() == poisoned) x[0][5] = 300.0;  // overflows in backward
    });
  };
  auto params = [](const ElementwiseNet& net) {
    deepspeed::zero::GatheredParameters gathered(*net);
    std::vector<at::Tensor> out;
    for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  for (int stage : {0, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    SharedTempDir dir;
    const auto cfg = deepspeed::Config::from_string(
        "{\"train_micro_batch_size_per_gpu\": 4, \"steps_per_print\": 1000,"
        " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01, \"momentum\": 0.9}},"
        " \"zero_optimization\": {\"stage\": " +
        std::to_string(stage) +
        "},"
        " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"hysteresis\": 2,"
        " \"loss_scale_window\": 3}}");
    ElementwiseNet ref_net;
    auto ref = deepspeed::initialize(ref_net, cfg);
    run(ref, 0, 8);
    {
      ElementwiseNet net;
      auto engine = deepspeed::initialize(net, cfg);
      run(engine, 0, 3);
      engine.save_checkpoint(dir.path());
    }
    ElementwiseNet net;
    auto engine = deepspeed::initialize(net, cfg);
    engine.load_checkpoint(dir.path());
    run(engine, 3, 8);
    EXPECT_EQ(engine.loss_scale(), ref.loss_scale());
    EXPECT_EQ(engine.skipped_steps(), ref.skipped_steps());
    EXPECT_EQ(engine.skipped_steps(), 2) << "steps 1 and 4 overflow; hysteresis 2 skips both";
    expect_equal(params(net), params(ref_net), "fp16 parameters after the resume");
  }
}

// A loss-scaler state this configuration cannot take (cur_hysteresis 99 with hysteresis 2) is refused naming the file
// and the field before anything is applied: the masters keep this run's values, and the engine trains on exactly as
// one that never tried to load (before the loader's plan, the masters were overwritten first).
TEST(EngineCheckpoint, ABadLossScalerSectionIsRefusedBeforeAnythingChanges) {
  using elementwise_net::ElementwiseNet;
  tiny_gpt::ensure_comm();
  auto run = [&](deepspeed::Engine& engine, int first, int last) { train_elementwise(engine, first, last, {}); };
  auto params = [](const ElementwiseNet& net) {
    std::vector<at::Tensor> out;
    for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  SharedTempDir dir;
  const auto cfg = deepspeed::Config::from_string(
      "{\"train_micro_batch_size_per_gpu\": 4, \"steps_per_print\": 1000,"
      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01, \"momentum\": 0.9}},"
      " \"zero_optimization\": {\"stage\": 2}, \"fp16\": {\"enabled\": true, \"hysteresis\": 2}}");
  ElementwiseNet ref_net;
  auto ref = deepspeed::initialize(ref_net, cfg);
  run(ref, 0, 5);
  ElementwiseNet net;
  auto engine = deepspeed::initialize(net, cfg);
  run(engine, 0, 2);
  engine.save_checkpoint(dir.path());
  if (rank() == 0) {
    const std::string path = ckpt::model_states_path(dir.path(), "global_step2");
    ckpt::StateDict state = ckpt::load_state(path);
    state.at("loss_scaler").toGenericDict().insert_or_assign(std::string("cur_hysteresis"), int64_t{99});
    ckpt::save_state(path, state);
  }
  barrier();
  run(engine, 2, 4);
  try {
    engine.load_checkpoint(dir.path());
    ADD_FAILURE() << "a loss-scaler state the configuration cannot take was loaded";
  } catch (const ckpt::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("mp_rank_00_model_states.pt: loss_scaler"), std::string::npos) << what;
    EXPECT_NE(what.find("cur_hysteresis 99"), std::string::npos) << what;
  }
  EXPECT_EQ(engine.global_steps(), 4);
  run(engine, 4, 5);
  expect_equal(params(net), params(ref_net), "parameters after the refused load and one more step");
  EXPECT_EQ(engine.loss_scale(), ref.loss_scale());
}

// A client torch::optim optimizer (stage 0) is saved in torch's own archive format inside the rank
// file.
TEST(EngineCheckpoint, ClientOptimizerStateRoundTrips) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  const auto cfg = deepspeed::Config::from_string(
      "{\"train_micro_batch_size_per_gpu\": 2, \"steps_per_print\": 1000}");
  auto make = [&](deepspeed::models::GPT& model) {
    deepspeed::InitializeOptions o;
    o.optimizer =
        std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.003));
    return deepspeed::initialize(model, cfg, o);
  };
  auto ref_model = tiny_gpt::make_model(c);
  auto ref = make(ref_model);
  tiny_gpt::train(ref, data, 4);
  {
    auto model = tiny_gpt::make_model(c);
    auto engine = make(model);
    tiny_gpt::train(engine, data, 2);
    engine.save_checkpoint(dir.path());
  }
  auto model = tiny_gpt::make_model(c);
  auto engine = make(model);
  engine.load_checkpoint(dir.path());
  tiny_gpt::train(engine, data, 2, 2);
  expect_equal(full_params(model), full_params(ref_model), "parameters after the resume");
}

TEST(EngineCheckpoint, FilesFollowDeepSpeedsLayout) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(2)));
  tiny_gpt::train(engine, data, 1);
  auto client = ckpt::make_state_dict();
  client.insert("data_step", int64_t{1});
  client.insert("note", std::string("resume me"));
  engine.save_checkpoint(dir.path(), "first", client);
  barrier();
  EXPECT_EQ(ckpt::read_latest(dir.path()), "first");
  const int world = deepspeed::comm::get_world_size();
  for (int r = 0; r < world; ++r)
    EXPECT_TRUE(fs::exists(ckpt::optim_states_path(dir.path(), "first", r))) << r;
  EXPECT_FALSE(fs::exists(ckpt::optim_states_path(dir.path(), "first", world)));
  auto model_states = ckpt::load_state(ckpt::model_states_path(dir.path(), "first"));
  EXPECT_EQ(model_states.at("global_steps").toInt(), 1);
  EXPECT_EQ(model_states.at("dp_world_size").toInt(), world);
  EXPECT_EQ(model_states.at("zero_stage").toInt(), 2);
  // Stages 0-2 save the whole module in the model's dtype under torch's names.
  auto module = model_states.at("module").toGenericDict();
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(at::equal(module.at(item.key()).toTensor(), item.value())) << item.key();
  // No temporaries are left behind.
  for (const auto& entry : fs::directory_iterator(dir.path() + "/first"))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();

  auto loaded = engine.load_checkpoint(dir.path());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->client_state.at("data_step").toInt(), 1);
  EXPECT_EQ(loaded->client_state.at("note").toStringRef(), "resume me");
}

TEST(EngineCheckpoint, LoadsIntoAnotherStage) {
  // Saved at stage S, continued at stage T: the same numbers as a run at stage T throughout, up to
  // the reduction order of the two stages (fp32).
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  for (auto [from, to] : std::vector<std::pair<int, int>>{{3, 1}, {1, 3}, {0, 2}, {2, 0}, {3, 0}}) {
    SCOPED_TRACE("stage " + std::to_string(from) + " -> " + std::to_string(to));
    SharedTempDir dir;
    auto ref_model = tiny_gpt::make_model(c);
    auto ref = deepspeed::initialize(ref_model, deepspeed::Config::from_string(config_json(to)));
    tiny_gpt::train(ref, data, 4);
    const auto want = full_params(ref_model);
    {
      auto model = tiny_gpt::make_model(c);
      auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(from)));
      tiny_gpt::train(engine, data, 2);
      engine.save_checkpoint(dir.path());
    }
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(to)));
    ASSERT_TRUE(engine.load_checkpoint(dir.path()).has_value());
    tiny_gpt::train(engine, data, 2, /*first_step=*/2);
    // Two steps at stage S, two at T, against four at T: the stages' reductions add in other orders, under Adam
    // (the reordering of tests/zero's stage comparisons, measured there at both SIMD levels); a partition restored
    // to the wrong rank or element is off by the weights' size.
    EXPECT_WITHIN(tiny_gpt::max_relative_error(full_params(model), want),
                  tiny_gpt::bound_at_this_world(tolerance::measured(3.4e-6, 3.5e-6)));
  }
}

TEST(EngineCheckpoint, ModuleOnlyAndOptimizerlessLoads) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  const auto cfg = deepspeed::Config::from_string(config_json(2));
  std::vector<at::Tensor> saved;
  {
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, cfg);
    tiny_gpt::train(engine, data, 3);
    saved = full_params(model);
    engine.save_checkpoint(dir.path());
  }
  {
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, cfg);
    deepspeed::LoadCheckpointOptions o;
    o.load_module_only = true;
    ASSERT_TRUE(engine.load_checkpoint(dir.path(), o).has_value());
    expect_equal(full_params(model), saved, "weights");
    EXPECT_EQ(engine.global_steps(), 0) << "load_module_only must not restore counters";
  }
  {
    // Without optimizer states the counters and schedule come back but Adam starts afresh, so the
    // next step differs from the resumed one.
    auto resumed_model = tiny_gpt::make_model(c);
    auto resumed = deepspeed::initialize(resumed_model, cfg);
    resumed.load_checkpoint(dir.path());
    tiny_gpt::train(resumed, data, 1, 3);
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, cfg);
    deepspeed::LoadCheckpointOptions o;
    o.load_optimizer_states = false;
    ASSERT_TRUE(engine.load_checkpoint(dir.path(), o).has_value());
    EXPECT_EQ(engine.global_steps(), 3);
    EXPECT_EQ(engine.get_lr(), resumed.get_lr()) << "the schedule is restored";
    tiny_gpt::train(engine, data, 1, 3);
    // Adam restarted from zero moments moves each weight by about lr: far more than float rounding.
    EXPECT_GT(tiny_gpt::max_relative_error(full_params(model), full_params(resumed_model)),
              100 * tolerance::kFp32Epsilon);
  }
}

TEST(EngineCheckpoint, ConsolidatedWeightsEqualTrainedWeights) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(3)));
  tiny_gpt::train(engine, data, 2);
  engine.save_checkpoint(dir.path());
  std::vector<std::pair<std::string, at::Tensor>> want;
  {
    deepspeed::zero::GatheredParameters gathered(*model);
    for (const auto& item : model->named_parameters())
      want.emplace_back(item.key(), item.value().clone());
  }
  if (rank() == 0) {
    const std::string out = dir.path() + "/model.safetensors";
    ckpt::consolidate_fp32(dir.path(), "", out);
    auto merged = ckpt::testing::read_safetensors(out);
    for (const auto& [name, value] : want) {
      ASSERT_TRUE(merged.count(name)) << name;
      EXPECT_TRUE(at::equal(merged.at(name), value)) << name;
    }
  }
  barrier();
}

// save_16bit_model and stage3_gather_16bit_weights_on_model_save: the whole module in the model's
// dtype, gathered one unit at a time at stage 3, equal to the trained parameters.
TEST(EngineCheckpoint, Save16bitModelWritesTheWholeModule) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  const std::string gather = ", \"stage3_gather_16bit_weights_on_model_save\": true";
  for (const Case& k :
       std::vector<Case>{{2, "", "\"bf16\": {\"enabled\": true},", "stage 2 bf16"},
                         {3, gather, "", "stage 3"},
                         {3, gather, "\"bf16\": {\"enabled\": true},", "stage 3 bf16"}}) {
    SCOPED_TRACE(k.name);
    SharedTempDir dir;
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(
        model, deepspeed::Config::from_string(config_json(k.stage, k.zero_extra, k.top_extra)));
    tiny_gpt::train(engine, data, 1);
    ASSERT_TRUE(engine.save_16bit_model(dir.path()));
    engine.save_checkpoint(dir.path());
    std::vector<std::pair<std::string, at::Tensor>> want;
    {
      deepspeed::zero::GatheredParameters gathered(*model);
      for (const auto& item : model->named_parameters())
        want.emplace_back(item.key(), item.value().detach().clone());
    }
    if (rank() == 0) {
      auto exported = ckpt::load_state(dir.path() + "/pytorch_model.bin");
      auto module = ckpt::load_state(ckpt::model_states_path(dir.path(), "global_step1"))
                        .at("module")
                        .toGenericDict();
      for (const auto& [name, value] : want) {
        ASSERT_TRUE(exported.contains(name)) << name;
        EXPECT_TRUE(at::equal(exported.at(name).toTensor(), value)) << name;
        EXPECT_TRUE(at::equal(module.at(name).toTensor(), value))
            << "checkpoint's module: " << name;
      }
    }
    barrier();
  }
  // Stage 3 without the flag: nothing is gathered or written.
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(3)));
  EXPECT_FALSE(engine.save_16bit_model(dir.path()));
  EXPECT_FALSE(fs::exists(dir.path() + "/pytorch_model.bin"));
}

// A failed load leaves the engine as it was and still able to train.
void expect_refused(deepspeed::Engine& engine, const deepspeed::models::GPT& model,
                    const at::Tensor& data, const std::string& dir,
                    const std::optional<std::string>& tag, const std::string& needle) {
  const auto before = full_params(model);
  const int64_t steps = engine.global_steps();
  deepspeed::LoadCheckpointOptions o;
  o.tag = tag;
  try {
    engine.load_checkpoint(dir, o);
    ADD_FAILURE() << "a broken checkpoint was loaded (expected an error mentioning '" << needle
                  << "')";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
  expect_equal(full_params(model), before, "parameters after a refused load");
  EXPECT_EQ(engine.global_steps(), steps);
  tiny_gpt::train(engine, data, 1, static_cast<int>(steps));
}

TEST(EngineCheckpoint, BrokenCheckpointsAreRefusedAndLoseNothing) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  const auto cfg = deepspeed::Config::from_string(config_json(2));
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, cfg);
  tiny_gpt::train(engine, data, 1);
  engine.save_checkpoint(dir.path(), "a");
  engine.save_checkpoint(dir.path(), "b");
  for (const char* t : {"missing_rank", "truncated", "mixed"}) {
    engine.save_checkpoint(dir.path(), t);
  }
  if (rank() == 0) {
    fs::remove(ckpt::optim_states_path(dir.path(), "missing_rank", 0));
    fs::resize_file(ckpt::model_states_path(dir.path(), "truncated"),
                    fs::file_size(ckpt::model_states_path(dir.path(), "truncated")) / 2);
    fs::copy_file(ckpt::optim_states_path(dir.path(), "a", 0),
                  ckpt::optim_states_path(dir.path(), "mixed", 0),
                  fs::copy_options::overwrite_existing);
  }
  barrier();
  expect_refused(engine, model, data, dir.path(), "missing_rank", "zero_pp_rank_");
  expect_refused(engine, model, data, dir.path(), "truncated", "mp_rank_00_model_states.pt");
  expect_refused(engine, model, data, dir.path(), "mixed", "another run");
  expect_refused(engine, model, data, dir.path(), "no_such_tag", "no_such_tag");
  EXPECT_FALSE(engine.load_checkpoint(dir.path() + "/empty").has_value())
      << "no latest: nothing to resume";

  // Another model's checkpoint: the parameter and both shapes are named.
  auto other_cfg = model_config();
  other_cfg.hidden = 48;
  other_cfg.heads = 4;
  SharedTempDir other_dir;
  {
    auto other_model = tiny_gpt::make_model(other_cfg);
    auto other = deepspeed::initialize(other_model, cfg);
    other.save_checkpoint(other_dir.path());
  }
  expect_refused(engine, model, data, other_dir.path(), std::nullopt, "shape");
}

TEST(EngineCheckpoint, SaveRefusesMidAccumulationAndBadTags) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(1)));
  EXPECT_THROW(engine.save_checkpoint(dir.path(), std::string("a/b")), deepspeed::Error);
  at::Tensor x, y;
  tiny_gpt::split_batch(data, {0, 1}, &x, &y);
  engine.backward(engine.forward(x.to(engine.device()), y.to(engine.device())));
  engine.step();  // micro step 1 of 2
  try {
    engine.save_checkpoint(dir.path());
    ADD_FAILURE() << "saved in the middle of gradient accumulation";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("accumulation boundary"), std::string::npos) << e.what();
  }
}

// A byte flipped in a rank file's tensor data: the load is refused naming the file and the record
// (rank 0, which reads that file; the others name rank 0), the engine keeps its state, and the same
// checkpoint unflipped loads.
// Flips one bit of the byte in the middle of `file`, in place.
void flip_middle_byte(const std::string& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto mid = static_cast<std::streamoff>(fs::file_size(file) / 2);
  char b = 0;
  f.seekg(mid);
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x10);
  f.seekp(mid);
  f.write(&b, 1);
}

TEST(EngineCheckpoint, FlippedByteInTensorDataIsRefusedNamingFileAndRecord) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(2)));
  tiny_gpt::train(engine, data, 1);
  engine.save_checkpoint(dir.path(), "good");
  engine.save_checkpoint(dir.path(), "flipped");
  // Past the checkpoint: a rank that applied it despite the refusal would go back a step.
  tiny_gpt::train(engine, data, 1, 1);
  const std::string file = ckpt::optim_states_path(dir.path(), "flipped", 0);
  // The middle of the file lies in rank 0's fp32 partition or its Adam state: nearly all of the
  // file.
  if (rank() == 0) flip_middle_byte(file);
  barrier();
  deepspeed::LoadCheckpointOptions o;
  o.tag = "flipped";
  try {
    engine.load_checkpoint(dir.path(), o);
    ADD_FAILURE() << "a checkpoint with a flipped byte loaded";
  } catch (const ckpt::CheckpointError& e) {
    const std::string what = e.what();
    if (rank() == 0) {
      EXPECT_NE(dynamic_cast<const ckpt::CheckpointCorruptError*>(&e), nullptr) << what;
      EXPECT_NE(what.find("checkpoint file " + file + " is corrupt: record archive/data/"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("fails its checksum"), std::string::npos) << what;
    } else {
      // Another rank checks a share of rank 0's file too (verify_record_share): it may find the flip itself, and
      // then the ranks that found nothing name the highest rank that did.
      EXPECT_TRUE(what.find("load_checkpoint failed on rank ") != std::string::npos ||
                  what.find("checkpoint file " + file + " is corrupt: record archive/data/") != std::string::npos)
          << what;
    }
  }
  // Every rank kept its state: one more step lands where three uninterrupted steps do (no rank
  // applied anything).
  EXPECT_EQ(engine.global_steps(), 2);
  tiny_gpt::train(engine, data, 1, 2);
  auto ref_model = tiny_gpt::make_model(c);
  auto ref = deepspeed::initialize(ref_model, deepspeed::Config::from_string(config_json(2)));
  tiny_gpt::train(ref, data, 3);
  expect_equal(full_params(model), full_params(ref_model),
               "parameters after the refused load and a step");
  o.tag = "good";
  EXPECT_TRUE(engine.load_checkpoint(dir.path(), o).has_value());
}

// At stages 1-2 no rank copies from the module weights in mp_rank_00_model_states.pt (the fp32 masters come from the
// rank files), so a per-tensor check alone let a flipped byte there load silently (issue 52). Every record of every
// file a load opens is now checked by some rank: the load is refused on every rank, naming the file on the rank
// that found it, and nothing is applied.
TEST(EngineCheckpoint, FlippedByteInARecordNoRankCopiesFromIsRefused) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(2)));
  tiny_gpt::train(engine, data, 1);
  engine.save_checkpoint(dir.path(), "flipped");
  const std::string file = ckpt::model_states_path(dir.path(), "flipped");
  // The module's weights are nearly all of the model file: its middle lies in one of them.
  if (rank() == 0) flip_middle_byte(file);
  barrier();
  tiny_gpt::train(engine, data, 1, 1);
  const std::vector<at::Tensor> before = full_params(model);
  deepspeed::LoadCheckpointOptions o;
  o.tag = "flipped";
  int refused = 0, named = 0;
  try {
    engine.load_checkpoint(dir.path(), o);
  } catch (const ckpt::CheckpointError& e) {
    const std::string what = e.what();
    refused = 1;
    named = what.find("checkpoint file " + file + " is corrupt: record archive/data/") != std::string::npos;
    EXPECT_TRUE(named || what.find("load_checkpoint failed on rank") != std::string::npos) << what;
  }
  EXPECT_EQ(refused, 1) << "a model file with a flipped byte loaded";
  at::Tensor counts = at::tensor({static_cast<int64_t>(named)}, at::kLong);
  deepspeed::comm::get_world_group().all_reduce(counts);
  EXPECT_GE(counts.item<int64_t>(), 1) << "no rank named the corrupt record";
  EXPECT_EQ(engine.global_steps(), 2);
  expect_equal(full_params(model), before, "parameters after the refused load");
}

// Saved at global batch 4w (micro 2 x accumulation 2 x w ranks), resumed at 2w: the samples
// consumed carry over, rank 0 says so in one line, and positioning the data by samples reads on
// from the next unread sample.
TEST(EngineCheckpoint, ResumeAtAnotherGlobalBatchKeepsTheSamplesConsumed) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  const int64_t w = deepspeed::comm::get_world_size();
  std::string small_json = config_json(2);
  const std::string gas2 = "\"gradient_accumulation_steps\": 2";
  small_json.replace(small_json.find(gas2), gas2.size(), "\"gradient_accumulation_steps\": 1");
  {
    auto model = tiny_gpt::make_model(c);
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(2)));
    ASSERT_EQ(engine.train_batch_size(), 4 * w);
    tiny_gpt::train(engine, data, 2);
    EXPECT_EQ(engine.global_samples(), 8 * w);
    engine.save_checkpoint(dir.path());
  }
  if (rank() == 0) {
    auto saved = ckpt::load_state(ckpt::model_states_path(dir.path(), "global_step2"));
    EXPECT_EQ(saved.at("global_samples").toInt(), 8 * w);  // DeepSpeed's key
  }
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(small_json));
  ASSERT_EQ(engine.train_batch_size(), 2 * w);
  testing::internal::CaptureStdout();
  ASSERT_TRUE(engine.load_checkpoint(dir.path()).has_value());
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(engine.global_steps(), 2);
  EXPECT_EQ(engine.global_samples(), 8 * w);
  const std::string notice = "was saved at global batch " + std::to_string(4 * w) +
                             ", this run's is " + std::to_string(2 * w) +
                             ": resuming after sample " + std::to_string(8 * w);
  if (rank() == 0) {
    EXPECT_NE(out.find(notice), std::string::npos) << out;
  } else {
    EXPECT_EQ(out.find(notice), std::string::npos) << out;
  }
  // Data step 4 at the new batch holds the first half of what step 2 at the old batch would have
  // read.
  const int64_t data_step = engine.global_samples() / engine.train_batch_size();
  EXPECT_EQ(data_step, 4);
  deepspeed::DataParallelSampler at_old(data.size(0), 4 * w, 1, 0, 1, tiny_gpt::kDataSeed);
  deepspeed::DataParallelSampler at_new(data.size(0), 2 * w, 1, 0, 1, tiny_gpt::kDataSeed);
  const auto old_next = at_old.global_batch(2);
  EXPECT_EQ(at_new.global_batch(data_step),
            std::vector<int64_t>(old_next.begin(), old_next.begin() + 2 * w));
  // Counting goes on at the new batch.
  tiny_gpt::train(engine, data, 1, static_cast<int>(data_step));
  EXPECT_EQ(engine.global_steps(), 3);
  EXPECT_EQ(engine.global_samples(), 10 * w);
}

// The next save removes what a killed save left (its temporaries, its partial tag directory) and
// nothing else.
TEST(EngineCheckpoint, SaveRemovesWhatKilledSavesLeft) {
  const auto c = model_config();
  const auto data = tiny_gpt::dataset(c);
  SharedTempDir dir;
  auto model = tiny_gpt::make_model(c);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(1)));
  tiny_gpt::train(engine, data, 1);
  engine.save_checkpoint(dir.path());  // global_step1, named by latest
  const std::string d = dir.path();
  char host_buf[256] = {};
  ::gethostname(host_buf, sizeof(host_buf) - 1);
  std::string host = host_buf;
  std::replace(host.begin(), host.end(), '/', '_');
  const std::string live_temp = d + "/notes.txt.tmp." + std::to_string(::getpid()) + "." + host;
  std::vector<std::string> stale;
  if (rank() == 0) {
    const pid_t child = ::fork();  // a pid that is gone by the time the save looks
    if (child == 0) ::_exit(0);
    ::waitpid(child, nullptr, 0);
    const std::string gone = std::to_string(child) + "." + host;
    fs::create_directories(d + "/global_step7");
    stale = {d + "/global_step7/.ds_saving." + gone,
             d + "/global_step7/zero_pp_rank_0_mp_rank_00_optim_states.pt.tmp." + gone,
             d + "/latest.tmp." + gone};
    for (const auto& p : stale) std::ofstream(p) << "partial";
    fs::copy_file(ckpt::optim_states_path(d, "global_step1", 0),
                  ckpt::optim_states_path(d, "global_step7", 1));
    std::ofstream(live_temp) << "a live writer's";
  }
  barrier();
  tiny_gpt::train(engine, data, 1, 1);
  testing::internal::CaptureStdout();
  engine.save_checkpoint(d);  // global_step2
  const std::string out = testing::internal::GetCapturedStdout();
  barrier();
  if (rank() == 0) {
    EXPECT_NE(out.find("removed 3 leftover(s) of interrupted saves in " + d), std::string::npos)
        << out;
    EXPECT_FALSE(fs::exists(d + "/global_step7"));
    for (const auto& p : stale) EXPECT_FALSE(fs::exists(p)) << p;
    EXPECT_TRUE(fs::exists(live_temp));
    EXPECT_TRUE(fs::exists(ckpt::model_states_path(d, "global_step1")));
    EXPECT_EQ(ckpt::read_latest(d), "global_step2");
    for (const auto& e : fs::directory_iterator(ckpt::tag_dir(d, "global_step2")))
      EXPECT_EQ(e.path().filename().string().find(".ds_saving."), std::string::npos)
          << "marker left: " << e.path();
  }
  auto loaded = engine.load_checkpoint(d);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->path, d + "/global_step2");
}

}  // namespace
