// Config: DeepSpeed's defaults, "auto", deprecated and aliased keys, cross-section checks, params
// accessors, file errors and dump.
#include "deepspeed/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <thread>

#include "config/small_file.h"
#include "config_error.h"

namespace deepspeed::config {
namespace {

using ::testing::HasSubstr;

TEST(ConfigDefaults, TopLevelMatchDeepSpeed) {
  Config c = Config::from_string("{}");
  EXPECT_FALSE(c.train_batch_size.has_value());
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.gradient_clipping, 1.0);  // DeepSpeed 0.19's GRADIENT_CLIPPING_DEFAULT
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_FALSE(c.memory_breakdown);
  EXPECT_FALSE(c.dump_state);
  EXPECT_FALSE(c.prescale_gradients);
  EXPECT_EQ(c.gradient_predivide_factor, 1.0);
  EXPECT_FALSE(c.sparse_gradients);
  EXPECT_FALSE(c.communication_data_type.has_value());
  EXPECT_FALSE(c.zero_allow_untested_optimizer);
  EXPECT_TRUE(c.zero_force_ds_cpu_optimizer);
  EXPECT_FALSE(c.optimizer.has_value());
  EXPECT_FALSE(c.scheduler.has_value());
  EXPECT_TRUE(c.auto_keys().empty());
}

TEST(ConfigDefaults, ZeroMatchDeepSpeed) {
  const ZeroConfig z = Config::from_string("{}").zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_TRUE(z.compute_grad_norm);
  EXPECT_TRUE(z.load_from_fp32_weights);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.param_persistence_threshold, 100000);
  EXPECT_EQ(z.model_persistence_threshold, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(z.max_live_parameters, 1000000000);
  EXPECT_EQ(z.max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.gather_16bit_weights_on_model_save);
  EXPECT_TRUE(z.ignore_unused_parameters);
  EXPECT_FALSE(z.round_robin_gradients);
  EXPECT_EQ(z.zero_hpz_partition_size, 1);
  EXPECT_EQ(z.mics_shard_size, -1);
  EXPECT_TRUE(z.memory_efficient_linear);
  EXPECT_FALSE(
      z.use_multi_rank_bucket_allreduce);  // ours: DeepSpeed's true is refused at stages 1/2
  EXPECT_FALSE(z.override_module_apply);   // ours: DeepSpeed's true is refused at stage 3
  EXPECT_EQ(z.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(z.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(z.offload_optimizer.ratio, 1.0);
  EXPECT_EQ(z.offload_param.buffer_count, 5);
  EXPECT_EQ(z.offload_param.buffer_size, 100000000);
  EXPECT_EQ(z.offload_param.max_in_cpu, 1000000000);
}

TEST(ConfigDefaults, SectionsMatchDeepSpeed) {
  Config c = Config::from_string("{}");
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_FALSE(c.bf16.enabled);
  EXPECT_EQ(c.aio.block_size, 1048576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.thread_count, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_FALSE(c.activation_checkpointing.number_checkpoints.has_value());
  EXPECT_FALSE(c.pipeline.stages.has_value());
  EXPECT_EQ(c.pipeline.partition, "best");
  EXPECT_TRUE(c.pipeline.pipe_partitioned);
  EXPECT_TRUE(c.pipeline.grad_partitioned);
  EXPECT_EQ(c.checkpoint.tag_validation,
            TagValidation::kFail);  // ours; DeepSpeed's Warn is refused
  EXPECT_TRUE(c.comms_logger.prof_all);
  EXPECT_EQ(c.monitor.tensorboard.job_name, "DeepSpeedJobName");
  EXPECT_EQ(c.monitor.wandb.project, "deepspeed");
  EXPECT_EQ(c.flops_profiler.profile_step, 1);
  EXPECT_EQ(c.flops_profiler.module_depth, -1);
  EXPECT_TRUE(c.flops_profiler.detailed);
  EXPECT_TRUE(c.autotuning.fast);
  EXPECT_EQ(c.autotuning.results_dir, "autotuning_results");
  EXPECT_EQ(c.autotuning.start_profile_step, 3);
  EXPECT_EQ(c.autotuning.end_profile_step, 5);
  EXPECT_EQ(c.autotuning.tuner_num_trials, 50);
  EXPECT_EQ(c.autotuning.max_train_micro_batch_size_per_gpu, 1024);
}

TEST(ConfigZero, OverlapCommDefaultsOnForStage3Only) {
  EXPECT_FALSE(Config::from_string(R"({"zero_optimization": {"stage": 2}})").zero.overlap_comm);
  EXPECT_TRUE(Config::from_string(R"({"zero_optimization": {"stage": 3}})").zero.overlap_comm);
  EXPECT_FALSE(Config::from_string(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})")
                   .zero.overlap_comm);
}

// "auto" under DeepSpeed's field name: the Trainer fills only the stage3_ key, DeepSpeed keeps its default for the
// leftover "auto" (checked against DeepSpeedConfig on axolotl's zero3_bf16.json, tests/config/real_corpus_test.py).
TEST(ConfigZero, AutoUnderTheFieldNameKeepsDeepSpeedsDefaultWithAWarning) {
  Config c =
      Config::from_string(R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": "auto"}})");
  EXPECT_FALSE(c.is_auto("zero_optimization.stage3_prefetch_bucket_size"));
  EXPECT_FALSE(c.is_auto("zero_optimization.prefetch_bucket_size"));
  EXPECT_EQ(c.zero.prefetch_bucket_size, 50000000);
  ASSERT_EQ(c.warnings().size(), 1u);
  EXPECT_THAT(c.warnings()[0], HasSubstr("zero_optimization.prefetch_bucket_size: \"auto\" under DeepSpeed's field "
                                         "name is not filled by Hugging Face's Trainer"));
  AutoValues known;
  known.hidden_size = 64;
  EXPECT_TRUE(c.resolve_auto(known).empty());
  EXPECT_EQ(c.zero.prefetch_bucket_size, 50000000);
}

TEST(ConfigAuto, ClearAutoAfterResolving) {
  Config c = Config::from_string(R"({"gradient_clipping": "auto"})");
  EXPECT_TRUE(c.is_auto("gradient_clipping"));
  EXPECT_THAT(c.dump(), HasSubstr("\"gradient_clipping\": \"auto\""));
  c.gradient_clipping = 1.0;
  c.clear_auto("gradient_clipping");
  EXPECT_THAT(c.dump(), HasSubstr("\"gradient_clipping\": 1.0"));
}

TEST(ConfigPrecision, BothEnabledIsAnError) {
  EXPECT_THAT(error_of(R"({"fp16": {"enabled": true}, "bfloat16": {"enabled": true}})"),
              HasSubstr("bf16.enabled: cannot be true together with fp16.enabled"));
}

TEST(ConfigPrecision, BothAutoIsFine) {
  Config c = Config::from_string(R"({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})");
  EXPECT_TRUE(c.is_auto("fp16.enabled"));
  EXPECT_TRUE(c.is_auto("bf16.enabled"));
}

TEST(ConfigOptimizer, TypesAreCaseInsensitiveAndCanonical) {
  EXPECT_EQ(Config::from_string(R"({"optimizer": {"type": "ADAMW"}})").optimizer->type, "adamw");
  EXPECT_EQ(Config::from_string(R"({"optimizer": {"type": "sgd"}})").optimizer->type, "SGD");
  EXPECT_EQ(Config::from_string(R"({"scheduler": {"type": "warmuplr"}})").scheduler->type,
            "WarmupLR");
}

TEST(ConfigOptimizer, UnknownTypeListsKnownOnes) {
  std::string e = error_of(R"({"optimizer": {"type": "Sophia"}})");
  EXPECT_THAT(e, HasSubstr("optimizer.type: unknown optimizer 'Sophia'"));
  for (const std::string& t : known_optimizer_types()) EXPECT_THAT(e, HasSubstr(t));
  EXPECT_THAT(error_of(R"({"optimizer": {"params": {}}})"), HasSubstr("optimizer.type: required"));
}

TEST(ConfigOptimizer, DefaultsFilledAndGivenKept) {
  Config c = Config::from_string(R"({"optimizer": {"type": "Adam", "params": {"lr": 0.01}}})");
  const Params& p = c.optimizer->params;
  EXPECT_EQ(p.get_number("lr", 0), 0.01);
  EXPECT_EQ(p.get_number("eps", 0), 1e-8);
  EXPECT_EQ(p.get_number("weight_decay", 1), 0.0);
  EXPECT_EQ(p.get_number_list("betas", {}), (std::vector<double>{0.9, 0.999}));
  EXPECT_TRUE(p.get_bool("bias_correction", false));
}

TEST(ConfigOptimizer, ParamsGettersNameThePath) {
  Config c = Config::from_string(
      R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": [0.9, 0.95]}}})");
  const Params& p = c.optimizer->params;
  EXPECT_TRUE(p.is_auto("lr"));
  try {
    p.get_number("lr", 0);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "optimizer.params.lr: expected a number, got \"auto\"");
  }
  EXPECT_THROW(p.get_bool("betas", false), ConfigError);
  EXPECT_EQ(p.get_number("not_there", 7.0), 7.0);
}

TEST(ConfigOptimizer, NegativeLearningRateAndOutOfRangeParamsAreRefused) {
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "Adam", "params": {"lr": -0.001}}})"),
            "optimizer.params.lr: expected a number >= 0, got -0.001");
  EXPECT_EQ(
      error_of(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "weight_decay": -1}}})"),
      "optimizer.params.weight_decay: expected a number >= 0, got -1");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})"),
            "optimizer.params.betas[1]: expected a number in [0, 1), got 1.0");
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "Lion", "params": {"betas": [-0.1, 0.99]}}})"),
            "optimizer.params.betas[0]: expected a number in [0, 1), got -0.1");
  // Zero is a valid learning rate (torch allows it: frozen training, or a schedule's start).
  EXPECT_EQ(error_of(R"({"optimizer": {"type": "Adam", "params": {"lr": 0}}})"), "");
}

TEST(ConfigOptimizer, SchedulerIntegerParamsRejectFractions) {
  EXPECT_THAT(
      error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10.5}}})"),
      HasSubstr("scheduler.params.warmup_num_steps: expected an integer, got 10.5"));
}

TEST(ConfigTopLevel, UnsupportedSectionsOnlyWhenDisabled) {
  EXPECT_NO_THROW(Config::from_string(R"({"amp": {"enabled": false}})"));
  EXPECT_THAT(error_of(R"({"amp": {"enabled": true, "opt_level": "O1"}})"),
              HasSubstr("amp: DeepSpeed's 'amp' is not supported by deepspeed-cpp"));
}

TEST(ConfigTopLevel, RootMustBeAnObject) {
  EXPECT_EQ(error_of("[1]"), "config: expected an object, got [1]");
}

TEST(ConfigTopLevel, PipelineStagesAutoOrCount) {
  EXPECT_FALSE(Config::from_string(R"({"pipeline": {"stages": "auto"}})").pipeline.stages);
  EXPECT_EQ(*Config::from_string(R"({"pipeline": {"stages": 2}})").pipeline.stages, 2);
  EXPECT_THAT(error_of(R"({"pipeline": {"stages": 0}})"), HasSubstr("pipeline.stages"));
}

// DeepSpeed's key names and its case-insensitive values; the shortened name an earlier release read is unknown.
TEST(ConfigTopLevel, CommunicationDataTypesUseDeepSpeedsKeys) {
  const Config c = Config::from_string(
      R"({"communication_data_type": "BF16", "seq_parallel_communication_data_type": "fp16"})");
  EXPECT_EQ(c.communication_data_type, DataType::kBf16);
  EXPECT_EQ(c.seq_parallel_communication_data_type, DataType::kFp16);
  EXPECT_EQ(Config::from_string("{}").seq_parallel_communication_data_type, DataType::kFp32);
  EXPECT_THAT(error_of(R"({"seq_parallel_communication_data_type": "int8"})"),
              HasSubstr("seq_parallel_communication_data_type: expected one of fp16, bf16, fp32"));
  // A misspelt top-level key: DeepSpeed goes on past it; we too, with a warning naming it and the key meant.
  const Config typo = Config::from_string(R"({"seq_parallel_comm_data_type": "bf16"})");
  ASSERT_EQ(typo.warnings().size(), 1u);
  EXPECT_EQ(typo.warnings()[0],
            "seq_parallel_comm_data_type: unknown key, ignored as DeepSpeed ignores it (did you "
            "mean 'seq_parallel_communication_data_type'?)");
}

TEST(ConfigFile, MissingFileNamesIt) {
  try {
    Config::from_file("/nonexistent/ds_config.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/ds_config.json: cannot read config file: No such file or directory"));
  }
}

TEST(ConfigFile, InvalidJsonNamesFileLineAndColumn) {
  const std::string path = ::testing::TempDir() + "ds_config_bad.json";
  {
    std::ofstream out(path);
    out << "{\n  \"train_batch_size\": 8,\n  \"fp16\": ]\n}\n";
  }
  try {
    Config::from_file(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path + ":3:11: invalid JSON: unexpected ']'"));
  }
  std::remove(path.c_str());
}

// Issue 52: a NUL in a key cut the message at the NUL ("nulkey.json: a"); control bytes are shown escaped, whole.
TEST(ConfigErrors, ControlBytesInKeysAreShownEscaped) {
  const Config top = Config::from_string(std::string("{\"train_batch_size\": 8, \"a\\u0000b\\nc\": 1}"));
  ASSERT_EQ(top.warnings().size(), 1u);  // a top-level key DeepSpeed ignores: a warning
  const std::string e = top.warnings()[0];
  EXPECT_THAT(e, HasSubstr("a\\x00b\\x0ac: unknown key")) << e;
  EXPECT_EQ(e.find('\0'), std::string::npos);
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "zero_optimization": {"sta\u0007ge": 1}})"),
              HasSubstr("zero_optimization.sta\\x07ge: unknown key"));
}

// Issue 52: /dev/zero as a config grew to 19 GB before a timeout. A config read is capped and refuses what is not a
// file or a pipe, in one line naming the path; a pipe (a process substitution) still works.
TEST(ConfigFile, ReadsAreCappedAndOnlyFromFilesOrPipes) {
  auto error_of_file = [](const std::string& path) {
    try {
      Config::from_file(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of_file("/dev/zero"),
            "/dev/zero: cannot read config file: it is not a regular file or a pipe (a character device)");
  EXPECT_EQ(error_of_file("/tmp"), "/tmp: cannot read config file: it is a directory");
  const std::string big = ::testing::TempDir() + "ds_config_big.json";
  {
    std::ofstream out(big);
    out << "{\"train_batch_size\": 8, \"_comment\": \"" << std::string(kSmallFileMaxBytes, 'x') << "\"}";
  }
  EXPECT_THAT(error_of_file(big), HasSubstr(big + ": cannot read config file: it is larger than 16 MiB"));
  std::remove(big.c_str());
  // A pipe with more than the cap behind it: refused after the cap, not read to the end.
  ::signal(SIGPIPE, SIG_IGN);  // the writer's last writes go to a pipe nobody reads any more
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    const std::string chunk(1 << 16, ' ');
    for (size_t sent = 0; sent <= kSmallFileMaxBytes + chunk.size(); sent += chunk.size())
      if (::write(fds[1], chunk.data(), chunk.size()) < 0) break;  // EPIPE once the reader gave up
    ::close(fds[1]);
  });
  const std::string pipe_path = "/proc/self/fd/" + std::to_string(fds[0]);
  EXPECT_THAT(error_of_file(pipe_path), HasSubstr("it is larger than 16 MiB"));
  ::close(fds[0]);
  writer.join();
  // A pipe holding a config is read whole.
  ASSERT_EQ(::pipe(fds), 0);
  const std::string text = R"({"train_batch_size": 8})";
  ASSERT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  EXPECT_EQ(*Config::from_file("/proc/self/fd/" + std::to_string(fds[0])).train_batch_size, 8);
  ::close(fds[0]);
}

TEST(ConfigDump, FillsEveryDefaultAndReloads) {
  Config c = Config::from_string(R"({"train_batch_size": 8})");
  std::string text = c.dump();
  EXPECT_THAT(text, HasSubstr("\"stage3_prefetch_bucket_size\": 50000000"));
  EXPECT_THAT(text, HasSubstr("\"initial_scale_power\": 16"));
  EXPECT_THAT(text, HasSubstr("\"tag_validation\": \"Fail\""));
  Config again = Config::from_string(text);
  EXPECT_EQ(again.dump(), text);
  EXPECT_EQ(c.dump(-1).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace deepspeed::config
