// The ds_check_config tool run as a user runs it: exit status, the one-line error, --set and
// --hidden_size resolving an all-"auto" Hugging Face config, and how each "auto" was resolved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTool = DS_CHECK_CONFIG_BIN;
const std::string kCorpus = DS_CONFIG_CORPUS_DIR;

struct ToolRun {
  int status = -1;     // exit status
  std::string output;  // stdout and stderr together
};

ToolRun run_tool(const std::string& args) {
  ToolRun r;
  FILE* pipe = ::popen((kTool + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

const std::string kHf = kCorpus + "/tool/hf_all_auto.json";

// Everything the Trainer would fill that a hidden size cannot.
const std::string kHfSets =
    " --set train_micro_batch_size_per_gpu=4 --set gradient_clipping=1.0"
    " --set fp16.enabled=false --set optimizer.params.lr=3e-4 --set "
    "optimizer.params.betas=[0.9,0.95]"
    " --set optimizer.params.eps=1e-8 --set optimizer.params.weight_decay=0.01"
    " --set scheduler.params.warmup_num_steps=100";

// What nothing says takes the Trainer's default arguments, one line each; what has no default (the model's hidden
// size) is named with the way to give it.
TEST(DsCheckConfig, AllAutoHuggingFaceConfigTakesTheTrainersDefaults) {
  const ToolRun missing = run_tool(kHf);
  EXPECT_EQ(missing.status, 1);
  EXPECT_THAT(missing.output, HasSubstr("zero_optimization.reduce_bucket_size: \"auto\" needs the model's hidden "
                                        "size"));
  EXPECT_THAT(missing.output, Not(HasSubstr("must be given")));
  const ToolRun r = run_tool(kHf + " --hidden_size 64");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"auto\" train_micro_batch_size_per_gpu = 8 (Hugging Face Trainer's default "
                                  "per_device_train_batch_size)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" train_batch_size = 8 (batch arithmetic, world size 1)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" gradient_clipping = 1 (Hugging Face Trainer's default max_grad_norm)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" optimizer.params.lr = 5e-05 (Hugging Face Trainer's default "
                                  "learning_rate)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" fp16.enabled = false (Hugging Face Trainer's default (no --fp16 "
                                  "flag))"));
  // The model's dtype, as initialize() reads it from the model.
  const ToolRun fp16 = run_tool(kHf + " --hidden_size 64 --model_dtype fp16");
  ASSERT_EQ(fp16.status, 0) << fp16.output;
  EXPECT_THAT(fp16.output, HasSubstr("\"auto\" fp16.enabled = true (AutoValues::model_dtype fp16)"));
}

TEST(DsCheckConfig, AllAutoHuggingFaceConfigResolvesWithSetAndHiddenSize) {
  const ToolRun r = run_tool(kHf + " --world_size 2 --hidden_size 64" + kHfSets);
  ASSERT_EQ(r.status, 0) << r.output;
  // How each "auto" became what it is, one line each.
  EXPECT_THAT(r.output, HasSubstr("\"auto\" train_micro_batch_size_per_gpu = 4 (--set)"));
  EXPECT_THAT(r.output,
              HasSubstr("\"auto\" train_batch_size = 8 (batch arithmetic, world size 2)"));
  EXPECT_THAT(
      r.output,
      HasSubstr("\"auto\" gradient_accumulation_steps = 1 (batch arithmetic, world size 2)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" zero_optimization.reduce_bucket_size = 4096 "
                                  "(hidden_size^2, hidden_size 64)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" zero_optimization.stage3_prefetch_bucket_size = 3686 "
                                  "(int(0.9 * hidden_size^2), hidden_size 64)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" zero_optimization.stage3_param_persistence_threshold = "
                                  "640 (10 * hidden_size, hidden_size 64)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" optimizer.params.lr = 3e-4 (--set)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" scheduler.params.warmup_min_lr = 0 (0, as the "
                                  "integration fills it)"));
  EXPECT_THAT(r.output, HasSubstr("\"auto\" scheduler.params.warmup_max_lr = 0.0003 "
                                  "(optimizer.params.lr)"));
  // The resolved config, with no "auto" left.
  EXPECT_THAT(r.output, HasSubstr("\"reduce_bucket_size\": 4096"));
  EXPECT_THAT(r.output, HasSubstr("\"train_batch_size\": 8"));
  // The only "auto" left is pipeline.stages, DeepSpeed's own (taken from the PipelineModule).
  const std::string json = r.output.substr(r.output.find("\n{"));
  size_t autos = 0;
  for (size_t at = json.find(": \"auto\""); at != std::string::npos;
       at = json.find(": \"auto\"", at + 1)) {
    ++autos;
  }
  EXPECT_EQ(autos, 1u);
  EXPECT_THAT(json, HasSubstr("\"stages\": \"auto\""));
}

TEST(DsCheckConfig, AutoLeftOverIsNamedOnOneLine) {
  // Without --hidden_size the bucket sizes stay "auto": refused by name, exit 1, one line.
  const ToolRun r = run_tool(kHf + kHfSets);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output,
              HasSubstr("hf_all_auto.json: zero_optimization.reduce_bucket_size: \"auto\" "
                        "needs the model's hidden size"));
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1);
}

TEST(DsCheckConfig, NegativeLearningRateIsRefused) {
  const ToolRun r = run_tool(kCorpus + "/tool/negative_lr.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output, "ds_check_config: " + kCorpus +
                          "/tool/negative_lr.json: optimizer.params.lr: expected a number >= 0, "
                          "got -0.001\n");
  // --set is checked the same way.
  const ToolRun s = run_tool(kHf + kHfSets + " --hidden_size 8 --set optimizer.params.lr=-1");
  EXPECT_EQ(s.status, 1);
  EXPECT_THAT(s.output, HasSubstr("optimizer.params.lr: expected a number >= 0, got -1"));
}

// Usable means initialize() takes it: a config that parses but asks for a combination the engine refuses fails here
// with the engine's message, and passes once --set mends it.
TEST(DsCheckConfig, RefusesWhatInitializeRefuses) {
  const std::string file = kCorpus + "/tool/compute_grad_norm_clipped.json";
  const ToolRun r = run_tool(file);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output.rfind("ds_check_config: " + file + ": zero_optimization.compute_grad_norm false: clipping needs "
                           "the norm; set gradient_clipping 0",
                           0),
            0u)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1);
  const ToolRun mended = run_tool(file + " --set gradient_clipping=0");
  EXPECT_EQ(mended.status, 0) << mended.output;
  EXPECT_THAT(mended.output, HasSubstr("\"compute_grad_norm\": false"));
}

// pipeline.stages > 1: pipe::initialize's rules (which deepspeed::initialize alone would refuse: a pipeline is built
// from a PipelineModule), and its stage engines' gate.
TEST(DsCheckConfig, APipelineConfigByThePipelineEnginesRules) {
  const std::string file = kCorpus + "/tool/pipeline_stages.json";
  const ToolRun ok = run_tool(file);
  EXPECT_EQ(ok.status, 0) << ok.output;
  const ToolRun zero2 = run_tool(file + " --set zero_optimization.stage=2");
  EXPECT_EQ(zero2.status, 1);
  EXPECT_THAT(zero2.output, HasSubstr(": zero_optimization.stage 2 is not supported with pipeline parallelism"));
  const ToolRun seed = run_tool(file + " --set pipeline.seed_layers=true");
  EXPECT_EQ(seed.status, 1);
  EXPECT_THAT(seed.output, HasSubstr(": pipeline.seed_layers: set PipelineModuleOptions::base_seed instead"));
  // The stage engines' gate still runs: here on what the pipeline section does not hold.
  const ToolRun sparse = run_tool(file + " --set sparse_gradients=true");
  EXPECT_EQ(sparse.status, 1);
  EXPECT_THAT(sparse.output, HasSubstr(": sparse_gradients: sparse gradient all-reduce"));
  // A one-stage pipeline (its checkpoint interval says it is one) still goes by the pipeline engine's rules.
  const ToolRun one_stage = run_tool(file + " --set pipeline.stages=1 --set data_types.grad_accum_dtype=bf16"
                                            " --set bf16.enabled=true");
  EXPECT_EQ(one_stage.status, 1);
  EXPECT_THAT(one_stage.output, HasSubstr(": data_types.grad_accum_dtype \"bf16\": a pipeline accumulates"));
  // Without a stage count or a module's key it is a deepspeed::initialize config: ZeRO 2 is fine there.
  const ToolRun plain = run_tool(file + " --set pipeline.stages=1 --set pipeline.activation_checkpoint_interval=0"
                                        " --set zero_optimization.stage=2");
  EXPECT_EQ(plain.status, 0) << plain.output;
}

TEST(DsCheckConfig, CommentsAndTrailingCommasAsDeepSpeedReadsThem) {
  const ToolRun r = run_tool(kCorpus + "/valid/trailing_commas_and_comments.json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"train_batch_size\": 8"));
}

}  // namespace
