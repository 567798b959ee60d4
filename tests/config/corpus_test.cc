// The corpus: real-world DeepSpeed configs under corpus/valid (each checked for a few resolved
// values) and broken ones under corpus/invalid (each starts with `// expect: <message part>`, the
// part of the ConfigError message it must produce). Every file in the folders is exercised; a new
// valid file without checks here fails CorpusValid.EveryFileHasChecks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/feature_gate.h"
#include "deepspeed/config.h"

namespace deepspeed::config {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kCorpus = DS_CONFIG_CORPUS_DIR;

std::vector<std::string> corpus_names(const std::string& sub) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCorpus + "/" + sub)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct ValidCase {
  int world_size;
  std::function<void(const Config&)> check;
  // How initialize() (and ds_check_config) refuses it, the start of the message; empty: it takes it. DeepSpeed takes
  // all of these; the refused ones name a feature this build does not have.
  std::string refused_at_initialize;
};

const std::map<std::string, ValidCase>& valid_cases() {
  static const std::map<std::string, ValidCase> kCases = {
      // A misspelt top-level key: DeepSpeed goes on past it, so do we, with a warning that suggests the key meant.
      {"top_level_typo",
       {1,
        [](const Config& c) {
          ASSERT_EQ(c.warnings().size(), 1u);
          EXPECT_THAT(c.warnings()[0], HasSubstr("gradient_clip: unknown key, ignored as DeepSpeed ignores it (did "
                                                 "you mean 'gradient_clipping'?)"));
          EXPECT_EQ(c.gradient_clipping, 1.0);  // DeepSpeed's default, as the key was not read
        }}},
      {"autotp_zero1",
       {8,
        [](const Config& c) {
          EXPECT_EQ(c.tensor_parallel.autotp_size, 4);
          EXPECT_EQ(c.tensor_parallel.dtype, "bf16");
          EXPECT_FALSE(c.tensor_parallel.use_default_specs);
          ASSERT_EQ(c.tensor_parallel.layer_specs.size(), 3u);
          EXPECT_EQ(c.tensor_parallel.layer_specs[0].partition_type, "row");
          EXPECT_EQ(c.tensor_parallel.layer_specs[0].patterns.size(), 2u);
          EXPECT_EQ(c.tensor_parallel.layer_specs[2].fused_parts, 2);
        }}},
      {"zenflow_zero2",
       {8,
        [](const Config& c) {
          ASSERT_TRUE(c.zero.zenflow.has_value());
          EXPECT_DOUBLE_EQ(c.zero.zenflow->topk_ratio, 0.05);
          EXPECT_EQ(c.zero.zenflow->select_strategy, "auto");
          EXPECT_FALSE(c.zero.zenflow->select_interval.has_value());  // "auto"
          EXPECT_EQ(c.zero.zenflow->update_interval, 4);
          EXPECT_TRUE(c.zero.zenflow->overlap_step);
          EXPECT_FALSE(c.zero.zenflow->steps_per_epoch.has_value());
        }}},
      {"zero3_nvme_offload",
       {8,
        [](const Config& c) {
          EXPECT_EQ(*c.train_batch_size, 256);
          EXPECT_EQ(c.zero.stage, 3);
          EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNvme);
          EXPECT_EQ(*c.zero.offload_param.nvme_path, "/local_nvme");
          EXPECT_EQ(c.zero.offload_param.buffer_size, 100000000);
          EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kNvme);
          EXPECT_TRUE(c.zero.offload_optimizer.pipeline());
          EXPECT_EQ(c.zero.sub_group_size, 1000000000);
          EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
          EXPECT_TRUE(c.bf16.enabled);
          EXPECT_EQ(c.aio.queue_depth, 8);
          EXPECT_EQ(c.optimizer->type, "adamw");
          EXPECT_EQ(c.optimizer->params.get_number_list("betas", {}),
                    (std::vector<double>{0.9, 0.95}));
        }}},
      {"zero2_bf16",
       {4,
        [](const Config& c) {
          EXPECT_EQ(*c.gradient_accumulation_steps, 2);  // 64 / (8 * 4)
          EXPECT_EQ(c.zero.stage, 2);
          EXPECT_EQ(c.zero.reduce_bucket_size, 200000000);
          EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
          EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
          EXPECT_TRUE(c.zero.round_robin_gradients);
          EXPECT_TRUE(c.bf16.enabled);
          EXPECT_FALSE(c.fp16.enabled);
        },
        ""}},  // round_robin_gradients: taken as DeepSpeed takes it (the same update; issue 56)
      {"fp16_dynamic_scaling",
       {2,
        [](const Config& c) {
          EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 4);  // 32 / 2 / 4
          EXPECT_TRUE(c.fp16.enabled);
          EXPECT_TRUE(c.fp16.dynamic_loss_scale());
          EXPECT_EQ(c.fp16.initial_scale_power, 12);
          EXPECT_EQ(c.fp16.loss_scale_window, 500);
          EXPECT_TRUE(c.fp16.consecutive_hysteresis);
          EXPECT_EQ(c.optimizer->type, "adam");
          EXPECT_TRUE(c.optimizer->params.get_bool("adam_w_mode", false));  // DeepSpeed's default
        }}},
      {"hf_auto_zero2",
       {2,
        [](const Config& c) {
          EXPECT_EQ(*c.train_batch_size, 32);  // 16 * 1 * 2: gas "auto" with only micro -> 1
          EXPECT_EQ(*c.gradient_accumulation_steps, 1);
          EXPECT_TRUE(c.is_auto("fp16.enabled"));
          EXPECT_TRUE(c.is_auto("bf16.enabled"));
          EXPECT_TRUE(c.is_auto("gradient_clipping"));
          EXPECT_TRUE(c.is_auto("zero_optimization.reduce_bucket_size"));
          EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);  // default kept under "auto"
          EXPECT_FALSE(c.fp16.enabled);
          EXPECT_TRUE(c.optimizer->params.is_auto("lr"));
          EXPECT_TRUE(c.scheduler->params.is_auto("warmup_num_steps"));
          EXPECT_EQ(c.scheduler->params.get_string("warmup_type", ""), "log");
        }}},
      {"hf_auto_zero3",
       {4,
        [](const Config& c) {
          EXPECT_EQ(*c.train_batch_size, 16);
          EXPECT_TRUE(c.is_auto("zero_optimization.stage3_prefetch_bucket_size"));
          EXPECT_TRUE(c.is_auto("zero_optimization.stage3_param_persistence_threshold"));
          EXPECT_EQ(c.zero.prefetch_bucket_size, 50000000);
          EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kCpu);
          EXPECT_TRUE(c.scheduler->params.is_auto("total_num_steps"));
        }}},
      {"pipeline_gpt",
       {4,
        [](const Config& c) {
          EXPECT_EQ(*c.gradient_accumulation_steps, 16);  // 256 / (4 * 4)
          EXPECT_EQ(*c.pipeline.stages, 4);
          EXPECT_EQ(c.pipeline.partition, "parameters");
          EXPECT_TRUE(c.pipeline.seed_layers);
          EXPECT_EQ(c.pipeline.activation_checkpoint_interval, 1);
          EXPECT_EQ(*c.activation_checkpointing.number_checkpoints, 24);
          EXPECT_TRUE(c.activation_checkpointing.partition_activations);
        },
        "pipeline.partition \"parameters\": set PipelineModuleOptions::partition_method instead"}},
      {"minimal_train_batch",
       {2,
        [](const Config& c) {
          EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 4);
          EXPECT_EQ(*c.gradient_accumulation_steps, 1);
          EXPECT_EQ(c.zero.stage, 0);
          EXPECT_FALSE(c.optimizer.has_value());
        }}},
      {"megatron_gpt2",
       {16,
        [](const Config& c) {
          EXPECT_EQ(*c.gradient_accumulation_steps, 4);  // 512 / (8 * 16)
          EXPECT_EQ(c.zero.reduce_bucket_size, 50000000);
          EXPECT_TRUE(c.zero.elastic_checkpoint);
          EXPECT_TRUE(c.wall_clock_breakdown);
          EXPECT_EQ(c.steps_per_print, 1);
        }}},
      {"legacy_cpu_offload",
       {1,
        [](const Config& c) {
          EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
          EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kCpu);
          EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
          EXPECT_TRUE(c.zero.overlap_comm);  // stage 3 default
        }}},
      {"onebit_adam",
       {32,
        [](const Config& c) {
          EXPECT_EQ(*c.gradient_accumulation_steps, 8);  // 4096 / (16 * 32)
          EXPECT_EQ(c.optimizer->type, "onebitadam");
          EXPECT_EQ(c.optimizer->params.get_int("freeze_step", 0), 23000);
          EXPECT_EQ(c.optimizer->params.get_string("comm_backend_name", ""), "nccl");
        },
        "optimizer.type: 'onebitadam' (DeepSpeed's 1-bit Adam"}},
      {"lamb_onecycle",
       {8,
        [](const Config& c) {
          EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 64);  // 1024 / 8 / 2
          EXPECT_EQ(c.optimizer->type, "lamb");
          EXPECT_DOUBLE_EQ(c.optimizer->params.get_number("max_coeff", 0), 0.3);
          EXPECT_EQ(c.scheduler->type, "OneCycle");
          EXPECT_FALSE(c.scheduler->params.get_bool("cycle_momentum", true));
          EXPECT_DOUBLE_EQ(c.scheduler->params.get_number("cycle_min_mom", 0), 0.8);
        }}},
      {"muon_zero2",
       {8,
        [](const Config& c) {
          EXPECT_EQ(*c.gradient_accumulation_steps, 1);  // 64 / (8 * 8)
          EXPECT_EQ(c.optimizer->type, "muon");
          EXPECT_DOUBLE_EQ(c.optimizer->params.get_number("muon_lr", 0), 0.02);
          EXPECT_DOUBLE_EQ(c.optimizer->params.get_number("adam_lr", 0), 3e-4);
          EXPECT_EQ(c.optimizer->params.get_string("ns_method", ""), "standard");
          EXPECT_EQ(c.optimizer->params.get_int("ns_steps", 0), 6);
        }}},
      {"sgd_lr_range_test",
       {1,
        [](const Config& c) {
          EXPECT_EQ(*c.train_batch_size, 32);
          EXPECT_EQ(c.optimizer->type, "SGD");
          EXPECT_TRUE(c.optimizer->params.get_bool("nesterov", false));
          EXPECT_EQ(c.scheduler->type, "LRRangeTest");
          EXPECT_EQ(c.scheduler->params.get_int("lr_range_test_step_size", 0), 200);
        }}},
      {"monitors",
       {1,
        [](const Config& c) {
          EXPECT_TRUE(c.monitor.enabled());
          EXPECT_EQ(c.monitor.tensorboard.job_name, "gpt_run");
          EXPECT_EQ(c.monitor.csv_monitor.job_name, "DeepSpeedJobName");
          EXPECT_EQ(*c.monitor.wandb.team, "ml");
          EXPECT_EQ(c.comms_logger.prof_ops,
                    (std::vector<std::string>{"all_reduce", "all_gather"}));
          EXPECT_FALSE(c.comms_logger.prof_all);
          EXPECT_EQ(c.flops_profiler.profile_step, 5);
          EXPECT_EQ(c.flops_profiler.top_modules, 3);
          EXPECT_FALSE(c.flops_profiler.output_file.has_value());
        },
        "wandb.enabled: Weights & Biases has no C++ client"}},
      {"autotuning",
       {2,
        [](const Config& c) {
          EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 32);  // micro "auto": 64 / 2
          EXPECT_TRUE(c.autotuning.enabled);
          EXPECT_EQ(c.autotuning.metric, "flops");
          EXPECT_EQ(c.autotuning.tuner_type, "model_based");
          EXPECT_EQ(c.autotuning.arg_mappings->at("gradient_accumulation_steps"),
                    "--gradient_accumulation_steps");
          EXPECT_EQ(*c.autotuning.model_info->num_params, 1300000000);
          EXPECT_FALSE(c.autotuning.model_info->hidden_size.has_value());
          EXPECT_EQ(c.autotuning.min_train_micro_batch_size_per_gpu, 1);
        }}},
      {"checkpoint_options",
       {1,
        [](const Config& c) {
          EXPECT_EQ(c.checkpoint.tag_validation, TagValidation::kFail);
          EXPECT_TRUE(c.checkpoint.load_universal);
          EXPECT_FALSE(c.checkpoint.parallel_write_pipeline_stage);
          EXPECT_FALSE(c.checkpoint.use_node_local_storage);
          EXPECT_TRUE(c.checkpoint.save_python_layout);
          EXPECT_EQ(*c.communication_data_type, DataType::kFp32);
          EXPECT_EQ(*c.data_types.grad_accum_dtype, DataType::kFp32);
          EXPECT_TRUE(c.bf16.immediate_grad_update);
        }}},
      {"zero3_field_name_aliases",
       {4,
        [](const Config& c) {
          EXPECT_EQ(c.zero.prefetch_bucket_size, 20000000);
          EXPECT_EQ(c.zero.param_persistence_threshold, 10000);
          EXPECT_EQ(c.zero.max_live_parameters, 300000000);
          EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
          EXPECT_EQ(c.zero.zero_hpz_partition_size, 8);
          EXPECT_TRUE(c.zero.zero_quantized_gradients);
        }}},
      {"bfloat16_old_name", {1, [](const Config& c) { EXPECT_TRUE(c.bf16.enabled); }}},
      {"trailing_commas_and_comments",
       {1,
        [](const Config& c) {
          EXPECT_EQ(*c.train_batch_size, 8);
          EXPECT_EQ(c.steps_per_print, 10);
        }}},
      {"zero_bool_legacy",
       {1,
        [](const Config& c) {
          EXPECT_EQ(c.zero.stage, 1);
          EXPECT_EQ(c.zero.allgather_bucket_size, 100000000);
        }}},
      {"disabled_unsupported_sections", {4, [](const Config& c) { EXPECT_EQ(*c.train_micro_batch_size_per_gpu, 4); }}},
      {"lion_warmup_cosine",
       {2,
        [](const Config& c) {
          EXPECT_EQ(*c.train_batch_size, 64);
          EXPECT_EQ(*c.seed, 1234);
          EXPECT_EQ(c.optimizer->type, "lion");
          EXPECT_EQ(c.optimizer->params.get_number_list("betas", {}),
                    (std::vector<double>{0.9, 0.99}));
          EXPECT_EQ(c.scheduler->type, "WarmupCosineLR");
          EXPECT_DOUBLE_EQ(c.scheduler->params.get_number("cos_min_ratio", 0), 0.0001);
          EXPECT_FALSE(c.zero.overlap_comm);
        }}},
  };
  return kCases;
}

TEST(CorpusValid, EveryFileHasChecks) {
  std::vector<std::string> files = corpus_names("valid");
  std::vector<std::string> cased;
  for (const auto& [name, unused] : valid_cases()) cased.push_back(name);
  EXPECT_EQ(files, cased);
  EXPECT_GE(files.size() + corpus_names("invalid").size(), 30u);
}

class CorpusValid : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusValid, LoadsResolvesAndRoundTrips) {
  const std::string path = kCorpus + "/valid/" + GetParam() + ".json";
  auto it = valid_cases().find(GetParam());
  ASSERT_NE(it, valid_cases().end()) << "no checks for " << path;
  Config c = Config::from_file(path);
  c.resolve_batch(it->second.world_size);
  it->second.check(c);
  // What the engines refuse from the config alone, as ds_check_config checks it.
  std::string refusal;
  try {
    check_config_alone(c);
  } catch (const ConfigError& e) {
    refusal = e.what();
  }
  const std::string& expected = it->second.refused_at_initialize;
  if (expected.empty()) {
    EXPECT_EQ(refusal, "") << path;
  } else {
    EXPECT_EQ(refusal.rfind(expected, 0), 0u) << path << ": " << refusal;
  }
  // dump() must load back to the same config.
  Config again = Config::from_string(c.dump());
  EXPECT_EQ(again.dump(), c.dump());
  EXPECT_EQ(again.auto_keys(), c.auto_keys());
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusValid, ::testing::ValuesIn(corpus_names("valid")));

class CorpusInvalid : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusInvalid, FailsWithExpectedMessage) {
  const std::string path = kCorpus + "/invalid/" + GetParam() + ".json";
  std::ifstream in(path);
  std::string first_line;
  std::getline(in, first_line);
  const std::string kPrefix = "// expect: ";
  ASSERT_EQ(first_line.rfind(kPrefix, 0), 0u) << path << " must start with '" << kPrefix << "'";
  const std::string expected = first_line.substr(kPrefix.size());
  ASSERT_GT(expected.size(), 10u);
  try {
    Config c = Config::from_file(path);
    c.resolve_batch(1);
    FAIL() << path << " loaded without error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(expected)) << path;
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusInvalid, ::testing::ValuesIn(corpus_names("invalid")));

}  // namespace
}  // namespace deepspeed::config
