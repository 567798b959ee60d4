// Features the config parses but this build does not implement are rejected by name, never ignored.
#include "config/feature_gate.h"
#include "config/initialize_rules.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config_error.h"
#include "deepspeed/config.h"

namespace deepspeed::config {
namespace {

// A config the gate refuses, and a part of the message that says why.
struct Refusal {
  std::string json, says;
};

// Each message starts with `key` (what the user has to change) and names its reason.
void expect_refusals(const std::string& key, const std::vector<Refusal>& cases) {
  for (const Refusal& c : cases) {
    const std::string msg = rejection(c.json);
    EXPECT_EQ(msg.rfind(key, 0), 0u) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

TEST(FeatureGate, PlainDataParallelConfigPasses) {
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},
                          "optimizer": {"type": "Adam", "params": {"lr": 0.001}}})"),
            "");
}

TEST(FeatureGate, ZeroStagesOneAndTwoWithMixedPrecisionPass) {
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "bf16": {"enabled": true},
                          "zero_optimization": {"stage": 2, "reduce_scatter": false, "overlap_comm": true}})"),
            "");
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "fp16": {"enabled": true},
                          "zero_optimization": {"stage": 1, "allgather_partitions": false}})"),
            "");
}

TEST(FeatureGate, CpuOffloadNeedsZeroAndRejectsNvmeOnlyKeys) {
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1,
                          "offload_optimizer": {"device": "cpu", "pin_memory": true}}})"),
            "");
  EXPECT_NE(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 0,
                          "offload_optimizer": {"device": "cpu"}}})")
                .find("needs zero_optimization.stage 1, 2 or 3, got stage 0"),
            std::string::npos);
  EXPECT_NE(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
                          "offload_optimizer": {"device": "cpu", "pipeline_read": true}}})")
                .find("apply to device \"nvme\" only"),
            std::string::npos);
}

// qwZ, qgZ and hpZ change stage 3's parameter gathers and gradient reductions: below it the keys would change
// nothing.
TEST(FeatureGate, QuantizedCommunicationNeedsStageThree) {
  for (const std::string key : {"zero_quantized_weights", "zero_quantized_gradients", "zero_hpz_partition_size"}) {
    const std::string value = key == "zero_hpz_partition_size" ? "2" : "true";
    const std::string msg =
        rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, ")" + key + R"(": )" + value + "}}");
    EXPECT_EQ(msg.rfind("zero_optimization." + key + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("stage 3's"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got stage 2"), std::string::npos) << msg;
    EXPECT_EQ(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, ")" + key + R"(": )" + value +
                        "}}"),
              "");
  }
}

// offload_optimizer.cpuadam_cores_perc: SuperOffload's worker share of the cores, as in DeepSpeed; changed without
// super_offload it would do nothing, so it is refused there, and 0 is out of DeepSpeed's range.
TEST(FeatureGate, CpuAdamCoresPercIsSuperOffloads) {
  auto config = [](const std::string& offload) {
    return R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu")" +
           offload + "}}}";
  };
  EXPECT_EQ(rejection(config(R"(, "super_offload": true, "cpuadam_cores_perc": 0.5)")), "");
  EXPECT_EQ(rejection(config(R"(, "cpuadam_cores_perc": 0.8)")), "");  // DeepSpeed's default, said explicitly
  const std::string alone = rejection(config(R"(, "cpuadam_cores_perc": 0.5)"));
  EXPECT_EQ(alone.rfind("zero_optimization.offload_optimizer.cpuadam_cores_perc: ", 0), 0u) << alone;
  EXPECT_NE(alone.find("needs offload_optimizer.super_offload true"), std::string::npos) << alone;
  const std::string zero = rejection(config(R"(, "super_offload": true, "cpuadam_cores_perc": 0)"));
  EXPECT_NE(zero.find("must be in (0, 1]"), std::string::npos) << zero;
}

// sub_group_size is taken as DeepSpeed takes it (0 included: one sub-group per parameter at stage 3; ignored at
// stages 1-2): it changes how the step is cut, not its values.
TEST(FeatureGate, SubGroupSizeIsAcceptedAsDeepSpeedAcceptsIt) {
  for (const char* json : {R"({"train_batch_size": 8, "zero_optimization": {"stage": 1, "sub_group_size": 1000}})",
                           R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "sub_group_size": 0}})"}) {
    const Config c = Config::from_string(json);
    EXPECT_NO_THROW(check_supported_features(c)) << json;
  }
}

TEST(FeatureGate, EachUnimplementedFeatureIsNamed) {
  struct Case {
    const char* json;
    const char* key;
  } cases[] = {
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "reduce_scatter": false}})",
       "zero_optimization.reduce_scatter"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_module_granularity_threshold": 10}})",
       "zero_optimization.stage3_module_granularity_threshold"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "round_robin_gradients": true},
          "checkpoint": {"save_layout": "python_deepspeed"}})",
       "zero_optimization.round_robin_gradients"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "contiguous_gradients": false}})",
       "zero_optimization.contiguous_gradients"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "zero_quantized_nontrainable_weights": true}})",
       "zero_optimization.zero_quantized_nontrainable_weights"},
      {R"({"train_batch_size": 8, "fp16": {"enabled": true, "auto_cast": true}})", "fp16.auto_cast"},
      {R"({"train_batch_size": 8, "sparse_gradients": true})", "sparse_gradients"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
          "zenflow": {"update_interval": 2, "offload": true}}})",
       "zero_optimization.zenflow.offload"},
      {R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
          "zenflow": {"update_interval": 2, "pt_reserved_cores_perc": 0.5}}})",
       "zero_optimization.zenflow.pt_reserved_cores_perc"},
      {R"({"train_batch_size": 8, "disable_allgather": true})", "disable_allgather"},
  };
  for (const auto& c : cases) {
    std::string msg = rejection(c.json);
    EXPECT_EQ(msg.rfind(c.key, 0), 0u) << "for " << c.json << " got: " << msg;
    EXPECT_NE(msg.find("not implemented"), std::string::npos) << msg;
  }
}

// data_types.grad_accum_dtype: fp32 anywhere; the model's own 16-bit dtype at stages 0-3 without ZenFlow; anything
// else is refused naming the key, the value and why.
TEST(FeatureGate, GradAccumDtypeIsFp32OrTheModelsOwn) {
  auto config = [](const std::string& precision, const std::string& accum, const std::string& zero) {
    return R"({"train_batch_size": 8, )" + precision + R"("data_types": {"grad_accum_dtype": ")" + accum +
           R"("}, "zero_optimization": {)" + zero + "}}";
  };
  const std::string bf16 = R"("bf16": {"enabled": true}, )", fp16 = R"("fp16": {"enabled": true}, )";
  for (const std::string stage : {"0", "1", "2", "3"}) {
    EXPECT_EQ(rejection(config(bf16, "bf16", "\"stage\": " + stage)), "");
    EXPECT_EQ(rejection(config(fp16, "fp16", "\"stage\": " + stage)), "");
    EXPECT_EQ(rejection(config(bf16, "fp32", "\"stage\": " + stage)), "");
  }
  EXPECT_EQ(rejection(config(bf16, "fp32", "\"stage\": 3")), "");
  // SuperOffload's speculative step takes 16-bit gradients as the synchronous step does (in fp32 chunks).
  EXPECT_EQ(
      rejection(config(bf16, "bf16", R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true})")),
      "");
  expect_refusals("data_types.grad_accum_dtype \"", {
      {config("", "bf16", "\"stage\": 1"), "data_types.grad_accum_dtype \"bf16\": gradients accumulate in fp32 or "
                                            "in the model's own dtype (fp32)"},
      {config(fp16, "bf16", "\"stage\": 1"), "in the model's own dtype (fp16)"},
      {config(bf16, "bf16", R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 2})"),
       "ZenFlow selects and steps on fp32 gradients"},
  });
}

// zero_optimization.compute_grad_norm false, by DeepSpeed 0.19's rules: stages 1-2, no clipping (given as 0: absent
// it is 1.0), no optimizer offload (so no ZenFlow), not stage 1 with bf16 and fp32 gradient accumulation.
TEST(FeatureGate, SkippingTheGradientNormNeedsNoClippingAtStagesOneAndTwo) {
  auto config = [](const std::string& top, const std::string& zero) {
    return R"({"train_batch_size": 8, )" + top + R"("zero_optimization": {"compute_grad_norm": false, )" + zero + "}}";
  };
  const std::string no_clip = R"("gradient_clipping": 0, )";
  EXPECT_EQ(rejection(config(no_clip, R"("stage": 1)")), "");
  EXPECT_EQ(rejection(config(no_clip + R"("bf16": {"enabled": true}, )", R"("stage": 2)")), "");
  EXPECT_EQ(rejection(config(no_clip + R"("bf16": {"enabled": true}, )", R"("stage": 1)")), "");
  EXPECT_EQ(rejection(config(no_clip + R"("bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}, )",
                             R"("stage": 2)")),
            "");
  expect_refusals("zero_optimization.compute_grad_norm false: ", {
      {config(no_clip, R"("stage": 0)"), "supported only at ZeRO stage 1 or 2 (as in DeepSpeed), got stage 0"},
      {config(no_clip, R"("stage": 3)"), "got stage 3"},
      {config("", R"("stage": 2)"), "set gradient_clipping 0 (absent, it is DeepSpeed's default 1.0), got 1"},
      {config(R"("gradient_clipping": 0.5, )", R"("stage": 2)"), "got 0.5"},
      {config(no_clip, R"("stage": 2, "offload_optimizer": {"device": "cpu"})"), "optimizer offload"},
      {config(no_clip, R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 2})"),
       "optimizer offload"},
      {config(no_clip + R"("bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}, )", R"("stage": 1)"),
       "stage 1 with bf16 parameters and data_types.grad_accum_dtype fp32"},
  });
}

// The optimizer section: the 1-bit optimizers DeepSpeed 0.19 removed, and Lamb and Muon (each tensor whole at the
// step) with what the config shows would split or overlap it. The same configs with Adam pass.
TEST(FeatureGate, OptimizerTypeAgainstTheRestOfTheConfig) {
  auto config = [](const std::string& type, const std::string& zero) {
    return R"({"train_batch_size": 8, "optimizer": {"type": ")" + type + R"(", "params": {"lr": 0.001}},
               "zero_optimization": {)" + zero + "}}";
  };
  // The config names them in any case; the message gives the parser's lower-case name.
  for (const auto& [type, named] : {std::pair{"OneBitAdam", "onebitadam"}, std::pair{"ZeroOneAdam", "zerooneadam"},
                                    std::pair{"OneBitLamb", "onebitlamb"}}) {
    expect_refusals(std::string("optimizer.type: '") + named + "' (DeepSpeed's 1-bit Adam",
                    {{config(type, R"("stage": 0)"), "DeepSpeed itself removed its 1-bit optimizers"}});
  }
  const std::string nvme = R"("stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"})";
  const std::string overlap = R"("stage": 2, "offload_optimizer": {"device": "cpu", "overlap_step": true})";
  const std::string zenflow = R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 2,
                                  "overlap_step": false})";
  const std::string zenflow_overlap = R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {
                                          "update_interval": 2, "overlap_step": true})";
  const std::string super = R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true})";
  for (const std::string type : {"Lamb", "Muon"}) {
    const std::string what = type == "Lamb" ? "Lamb's per-tensor trust ratio is not supported with "
                                            : "Muon's Newton-Schulz step on whole matrices is not supported with ";
    expect_refusals("optimizer.type: " + what, {
        {config(type, nvme), "zero_optimization.offload_optimizer.device nvme yet; use Adam/AdamW there"},
        {config(type, overlap), "with zero_optimization.offload_optimizer.overlap_step yet"},
        {config(type, super), "with zero_optimization.offload_optimizer.super_offload yet"},
    });
    EXPECT_EQ(rejection(config(type, R"("stage": 2, "offload_optimizer": {"device": "cpu"})")), "");
    // ZenFlow's selective update is AdamW's.
    for (const std::string& zero : {zenflow, zenflow_overlap})
      EXPECT_EQ(rejection(config(type, zero)), "zero_optimization.zenflow: needs the config's Adam or AdamW optimizer "
                                               "(its selective update is AdamW's; the rest takes the CPU Adam step)");
  }
  for (const std::string& zero : {nvme, overlap, zenflow, zenflow_overlap, super})
    EXPECT_EQ(rejection(config("AdamW", zero)), "") << zero;
}

// ZenFlow's selective AdamW over a window of update_interval iterations: Adam or AdamW with bias correction, no
// OneCycle momentum, gradient_accumulation_steps 1, no fp16 loss scaling (a missing optimizer section is
// initialize()'s to refuse, where a client optimizer would be).
TEST(FeatureGate, ZenFlowNeedsTheConfigsAdamOverItsOwnWindow) {
  auto config = [](const std::string& top, const std::string& params = "") {
    return R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 0.001)" + params + "}}, " + top +
           R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
               "zenflow": {"update_interval": 2}}})";
  };
  EXPECT_EQ(rejection(config("")), "");
  EXPECT_EQ(rejection(config(R"("bf16": {"enabled": true}, "gradient_accumulation_steps": 1, )")), "");
  expect_refusals("zero_optimization.zenflow: ", {
      {config("", R"(, "bias_correction": false)"), "optimizer.params.bias_correction false is not supported"},
      {config(R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.003}}, )"),
       "OneCycle's momentum cycling"},
      {config(R"("gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": 4, )"),
       "set gradient_accumulation_steps to 1, got 2"},
      {config(R"("fp16": {"enabled": true}, )"), "fp16 loss scaling is not supported with ZenFlow; use bf16"},
      {R"({"train_batch_size": 8, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {
           "stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 2}}})",
       "needs the config's Adam or AdamW optimizer"},
  });
}

// checkpoint.save_layout python_deepspeed writes what DeepSpeed's files hold: fp32 or bf16, Adam's two moments.
TEST(FeatureGate, PythonDeepSpeedLayoutHoldsFp32OrBf16AdamStates) {
  auto config = [](const std::string& top, const std::string& type = "AdamW") {
    return R"({"train_batch_size": 8, "checkpoint": {"save_layout": "python_deepspeed"}, "optimizer": {"type": ")" +
           type + R"(", "params": {"lr": 0.001}}, )" + top + R"("zero_optimization": {"stage": 2}})";
  };
  EXPECT_EQ(rejection(config("")), "");
  EXPECT_EQ(rejection(config(R"("bf16": {"enabled": true}, )", "Adam")), "");
  expect_refusals(
      "checkpoint.save_layout: python_deepspeed ",
      {
          {config(R"("fp16": {"enabled": true}, )"), "writes fp32 and bf16 checkpoints; fp16 is not supported"},
          {config("", "Lion"), "needs the config's Adam or AdamW optimizer"},
          {config(R"("tensor_parallel": {"autotp_size": 2}, )"), "is not supported with tensor parallelism"},
      });
  // round_robin_gradients reorders DeepSpeed's flat buffers at stages 1-2, which the files would have to follow.
  const std::string round_robin =
      R"({"train_batch_size": 8, "checkpoint": {"save_layout": "python_deepspeed"}, "zero_optimization": {"stage": 2,
          "round_robin_gradients": true}})";
  EXPECT_EQ(rejection(round_robin).rfind("zero_optimization.round_robin_gradients: round-robin gradient order", 0), 0u)
      << rejection(round_robin);
}

// gradient_allreduce_op "sum" (DeepSpeed 0.19): stages 0-2, not with ZenFlow, as DeepSpeed rules; any case.
TEST(FeatureGate, SummedGradientsAtStagesZeroToTwoWithoutZenFlow) {
  for (const std::string stage : {"0", "1", "2"}) {
    EXPECT_EQ(rejection(R"({"train_batch_size": 8, "gradient_allreduce_op": "Sum", "zero_optimization": {"stage": )" +
                        stage + "}}"),
              "");
  }
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "gradient_allreduce_op": "sum", "zero_optimization": {"stage": 3}})"),
            "gradient_allreduce_op \"sum\": not supported at ZeRO stage 3 (as in DeepSpeed); use \"mean\"");
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "gradient_allreduce_op": "sum", "zero_optimization": {"stage": 2,
                          "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 2}}})"),
            "gradient_allreduce_op \"sum\": not supported with ZenFlow (as in DeepSpeed); use \"mean\"");
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "gradient_allreduce_op": "mean", "zero_optimization": {"stage": 3}})"),
            "");
}

// bf16 master weights (and states): stages 1-3, optimizer offload (cpu or nvme) or bf16 states (as DeepSpeed
// requires).
TEST(FeatureGate, Bf16MastersAtStagesOneToThree) {
  auto config = [](const std::string& bf16, const std::string& zero, const std::string& extra = "") {
    return R"({"train_batch_size": 8, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true)" + bf16 +
           R"(}, "zero_optimization": {)" + zero + "}" + extra + "}";
  };
  const std::string states = R"(, "bf16_optimizer_states": true)";
  EXPECT_EQ(rejection(config(states, "\"stage\": 1")), "");
  EXPECT_EQ(rejection(config(states, "\"stage\": 3")), "");
  EXPECT_EQ(rejection(config(states, "\"stage\": 2", R"(, "data_types": {"grad_accum_dtype": "bf16"})")), "");
  // With offload to the CPU the states may stay fp32 (DeepSpeed's CPU Adam keeps them so by default).
  EXPECT_EQ(rejection(config("", R"("stage": 2, "offload_optimizer": {"device": "cpu"})")), "");
  EXPECT_EQ(rejection(config(states, R"("stage": 1, "offload_optimizer": {"device": "cpu"})")), "");
  // The overlapped step takes them as the synchronous one does (in fp32 chunks).
  EXPECT_EQ(rejection(config(states, R"("stage": 2, "offload_optimizer": {"device": "cpu", "overlap_step": true})")),
            "");
  // SuperOffload speculates their step in fp32 chunks too.
  EXPECT_EQ(rejection(config(states, R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true})")),
            "");
  // Swapped parameter partitions hold the model's dtype whatever the masters'.
  EXPECT_EQ(rejection(config(states, R"("stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"})")), "");
  // NVMe swaps them in their own dtype, with fp32 or bf16 states.
  for (const std::string& s : {std::string(), states})
    EXPECT_EQ(rejection(config(s, R"("stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"})")), "");
  struct Case {
    std::string json, says;
  } cases[] = {
      {config("", "\"stage\": 2"), "set bf16.bf16_optimizer_states true"},
      {config(states, "\"stage\": 1", R"(, "data_types": {"grad_accum_dtype": "fp32"})"),
       "data_types.grad_accum_dtype says fp32"},
      {R"({"train_batch_size": 8, "bf16": {"enabled": false, "bf16_master_weights_and_grads": true}, )"
       R"("zero_optimization": {"stage": 1}})",
       "needs bf16.enabled true"},
      {R"({"train_batch_size": 8, "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, )"
       R"("bf16_optimizer_states": true}})",
       "needs zero_optimization.stage 1, 2 or 3, got 0"},
  };
  for (const auto& c : cases) {
    const std::string msg = rejection(c.json);
    EXPECT_EQ(msg.rfind("bf16.bf16_master_weights_and_grads: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

// fp16 master weights: stages 1-3 with the optimizer offloaded (cpu or nvme, as DeepSpeed requires), and one 16-bit
// master dtype at a time.
TEST(FeatureGate, Fp16MastersNeedOptimizerOffload) {
  auto config = [](const std::string& zero, const std::string& extra = "") {
    return R"({"train_batch_size": 8, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, )"
           R"("zero_optimization": {)" + zero + "}" + extra + "}";
  };
  const std::string cpu = R"(, "offload_optimizer": {"device": "cpu"})";
  const std::string nvme = R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"})";
  for (const char* stage : {"1", "2", "3"}) {
    EXPECT_EQ(rejection(config(std::string("\"stage\": ") + stage + cpu)), "");
    EXPECT_EQ(rejection(config(std::string("\"stage\": ") + stage + nvme)), "");
  }
  EXPECT_EQ(rejection(config(R"("stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"})" + nvme)), "");
  EXPECT_EQ(rejection(config("\"stage\": 2" + cpu, R"(, "data_types": {"grad_accum_dtype": "fp16"})")), "");
  EXPECT_EQ(rejection(config(R"("stage": 2, "offload_optimizer": {"device": "cpu", "overlap_step": true})")), "");
  EXPECT_EQ(rejection(config(R"("stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": true})")), "");
  struct Case {
    std::string json, says;
  } cases[] = {
      {config("\"stage\": 2"), "needs zero_optimization.offload_optimizer.device \"cpu\" or \"nvme\""},
      {config("\"stage\": 1" + cpu, R"(, "data_types": {"grad_accum_dtype": "fp32"})"),
       "data_types.grad_accum_dtype says fp32"},
      {R"({"train_batch_size": 8, "fp16": {"enabled": false, "fp16_master_weights_and_grads": true}, )"
       R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})",
       "needs fp16.enabled true"},
      // Stage 0 (the rule lives once, here; the parser leaves it to this gate).
      {R"({"train_batch_size": 8, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})",
       "needs zero_optimization.stage 1, 2 or 3, got 0"},
  };
  for (const auto& c : cases) {
    const std::string msg = rejection(c.json);
    EXPECT_EQ(msg.rfind("fp16.fp16_master_weights_and_grads: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
  const std::string both = rejection(
      R"({"train_batch_size": 8, "fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, )"
      R"("bf16": {"bf16_master_weights_and_grads": true}, "zero_optimization": {"stage": 1}})");
  EXPECT_NE(both.find("choose one"), std::string::npos) << both;
}

// Parameter offload belongs to stage 3: below it DeepSpeed ignores the section (every rank keeps whole
// parameters), and so do we, with a warning; nothing is offloaded.
TEST(FeatureGate, ParameterOffloadBelowStageThreeIsIgnoredWithAWarning) {
  for (const char* device : {"cpu", "nvme"}) {
    const std::string offload = std::string(R"("offload_param": {"device": ")") + device + R"(", "nvme_path": "/tmp"})";
    const std::string below = R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, )" + offload + "}}";
    EXPECT_EQ(rejection(below), "");
    const Config c = Config::from_string(below);
    EXPECT_FALSE(c.zero.offload_param.enabled());
    ASSERT_EQ(c.warnings().size(), 1u);
    EXPECT_EQ(c.warnings()[0].rfind("zero_optimization.offload_param: ignored below stage 3", 0), 0u);
    EXPECT_EQ(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, )" + offload + "}}"), "");
  }
}

// The overlapped step hides the CPU optimizer's step: without optimizer offload to CPU there is none to hide.
TEST(FeatureGate, OverlapStepNeedsCpuOptimizerOffload) {
  for (const char* offload : {"", R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "overlap_step": true})"}) {
    std::string zero = std::string(R"({"stage": 2)") + offload + "}";
    if (*offload == 0) zero = R"({"stage": 2, "offload_optimizer": {"overlap_step": true}})";
    const std::string msg = rejection(R"({"train_batch_size": 8, "zero_optimization": )" + zero + "}");
    EXPECT_EQ(msg.rfind("zero_optimization.offload_optimizer.overlap_step", 0), 0u) << msg;
    EXPECT_NE(msg.find("needs offload_optimizer.device \"cpu\""), std::string::npos) << msg;
  }
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1,
                          "offload_optimizer": {"device": "cpu", "overlap_step": true}}})"),
            "");
}

// ZenFlow's section: DeepSpeed's own validation (ranges, strategy and interval pairing) at parse time, its need for
// CPU optimizer offload, and a config that passes.
TEST(FeatureGate, ZenFlowKeysAreCheckedAtParseTimeAndNeedCpuOffload) {
  auto error = [](const std::string& zenflow, const std::string& offload = R"("offload_optimizer": {"device": "cpu"}, )") {
    const std::string json = R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, )" + offload +
                             R"("zenflow": )" + zenflow + "}}";
    try {
      check_supported_features(Config::from_string(json));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"({"update_interval": 2, "select_strategy": "step", "select_interval": 4, "topk_ratio": 0.05})"), "");
  EXPECT_NE(error(R"({"update_interval": 2, "topk_ratio": 1.0})").find("zero_optimization.zenflow.topk_ratio"),
            std::string::npos);
  EXPECT_NE(error(R"({"update_interval": 0})").find("zero_optimization.zenflow.update_interval"), std::string::npos);
  EXPECT_NE(error(R"({"update_interval": 2, "select_strategy": "often"})").find("zenflow.select_strategy"),
            std::string::npos);
  const std::string pairing = error(R"({"update_interval": 2, "select_interval": 4})");
  EXPECT_NE(pairing.find("zero_optimization.zenflow.select_interval"), std::string::npos) << pairing;
  EXPECT_NE(pairing.find("\"auto\""), std::string::npos) << pairing;
  EXPECT_NE(error(R"({"update_interval": 2, "select_strategy": "step"})").find("needs a number"), std::string::npos);
  EXPECT_NE(error(R"({"update_interval": 2, "unknown": 1})").find("zero_optimization.zenflow.unknown"),
            std::string::npos);
  // update_interval "auto" (DeepSpeed's default) is the adaptive window auto_ratio tunes; with a fixed interval
  // auto_ratio would do nothing.
  EXPECT_EQ(error(R"({"topk_ratio": 0.1, "auto_ratio": 0.9})"), "");
  const std::string ratio = error(R"({"update_interval": 2, "auto_ratio": 0.9})");
  EXPECT_EQ(ratio.rfind("zero_optimization.zenflow.auto_ratio: tunes the adaptive window", 0), 0u) << ratio;
  // Stage 3: with partitions in memory (none or cpu); not with nvme partitions or SuperOffload.
  auto stage3 = [](const std::string& extra) {
    try {
      check_supported_features(Config::from_string(
          R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu")" +
          extra + R"(, "zenflow": {"update_interval": 2}}})"));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(stage3("}"), "");
  EXPECT_EQ(stage3(R"(}, "offload_param": {"device": "cpu"})"), "");
  EXPECT_NE(stage3(R"(}, "offload_param": {"device": "nvme", "nvme_path": "/tmp"})").find("offload_param \"nvme\""),
            std::string::npos);
  EXPECT_NE(stage3(R"(, "super_offload": true})").find("super_offload"), std::string::npos);
  const std::string no_offload = error(R"({"update_interval": 2})", "");
  EXPECT_EQ(no_offload.rfind("zero_optimization.zenflow: needs offload_optimizer.device \"cpu\"", 0), 0u) << no_offload;
}

// SuperOffload speculates stage 3's CPU optimizer step (DeepSpeed's only layout for it); the overlapped step is the
// other way to hide that step, and the two do not combine.
TEST(FeatureGate, SuperOffloadNeedsStageThreeWithCpuOptimizerOffload) {
  const std::string stage2 = rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "super_offload": true}}})");
  EXPECT_EQ(stage2.rfind("zero_optimization.offload_optimizer.super_offload", 0), 0u) << stage2;
  EXPECT_NE(stage2.find("got stage 2"), std::string::npos) << stage2;
  const std::string both = rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "super_offload": true, "overlap_step": true}}})");
  EXPECT_NE(both.find("super_offload and overlap_step"), std::string::npos) << both;
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "super_offload": true}}})"), "");
}

// Weights & Biases is refused with the reason (no C++ client), not as "not implemented yet".
TEST(FeatureGate, WandbNamesTheMissingClient) {
  const std::string msg = rejection(R"({"train_batch_size": 8, "wandb": {"enabled": true}})");
  EXPECT_EQ(msg.rfind("wandb.enabled", 0), 0u) << msg;
  EXPECT_NE(msg.find("no C++ client"), std::string::npos) << msg;
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "csv_monitor": {"enabled": true}})"), "");
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "tensorboard": {"enabled": true}})"), "");
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "flops_profiler": {"enabled": true}})"), "");
}

// The pipeline section belongs to deepspeed::pipe::initialize: the plain engine names it rather than ignore it.
TEST(FeatureGate, PipelineSectionNeedsThePipelineEngine) {
  std::string msg = rejection(R"({"train_batch_size": 8, "pipeline": {"stages": 2}})");
  EXPECT_EQ(msg.rfind("pipeline.stages 2", 0), 0u) << msg;
  EXPECT_NE(msg.find("deepspeed::pipe::initialize"), std::string::npos) << msg;
  for (const char* section : {R"({"partition": "uniform"})", R"({"seed_layers": true})",
                              R"({"activation_checkpoint_interval": 2})"}) {
    msg = rejection(std::string(R"({"train_batch_size": 8, "pipeline": )") + section + "}");
    EXPECT_EQ(msg.rfind("pipeline:", 0), 0u) << section << " got: " << msg;
  }
  EXPECT_EQ(rejection(R"({"train_batch_size": 8, "pipeline": {"stages": 1}})"), "");
}

// Each feature rule refuses its own example first, by its key (the README's message column comes from these
// examples), and none refuses a plain config.
TEST(FeatureGate, EachFeatureRuleRefusesItsExampleByItsKey) {
  ASSERT_GE(feature_rules().size(), 15u);
  for (const Rule& r : feature_rules()) {
    SCOPED_TRACE(r.key);
    EXPECT_FALSE(r.refused(Config{}));
    const std::string msg = rejection(r.example);
    EXPECT_EQ(msg, r.message(Config::from_string(r.example)));
    EXPECT_EQ(msg.rfind(r.key + ": ", 0), 0u) << msg;
  }
}

// Each combination rule (and each of pipe::initialize's) is the one that refuses its own example, with its message;
// a rule whose example another rule refuses first, or that the parser refuses, fails here. (An empty example: a
// rule only a Config built in code reaches.)
void expect_each_rule_refuses_its_example(const std::vector<Rule>& rules,
                                          const std::function<void(const Config&)>& check) {
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.key + " when " + r.when);
    EXPECT_FALSE(r.refused(Config{}));
    if (r.example.empty()) continue;
    Config c;
    ASSERT_NO_THROW(c = Config::from_string(r.example)) << r.example;
    EXPECT_TRUE(r.refused(c));
    std::string msg;
    try {
      check(c);
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg, r.message(c));
    EXPECT_EQ(msg.rfind(r.key, 0), 0u) << msg;
  }
}

TEST(FeatureGate, EachCombinationRuleRefusesItsExampleFirst) {
  ASSERT_GE(combination_rules().size(), 40u);
  expect_each_rule_refuses_its_example(combination_rules(), check_supported_features);
}

TEST(FeatureGate, EachPipelineRuleRefusesItsExampleFirst) {
  ASSERT_GE(pipeline_rules().size(), 9u);
  expect_each_rule_refuses_its_example(pipeline_rules(), check_pipeline_features);
}

// The rules that need what initialize sees: each refuses its own example config under its example facts, first in its
// phase, with its message; none refuses a plain config with plain facts.
TEST(InitializeRules, EachRefusesItsExampleFirstInItsPhase) {
  ASSERT_GE(initialize_rules().size(), 19u);
  for (const InitializeRule& r : initialize_rules()) {
    SCOPED_TRACE(r.key + " when " + r.when);
    EXPECT_FALSE(r.refused(Config{}, InitializeFacts{}));
    Config c;
    ASSERT_NO_THROW(c = Config::from_string(r.example)) << r.example;
    std::string msg;
    try {
      apply_initialize_rules(r.phase, c, r.facts);
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg, r.message(c, r.facts));
    EXPECT_EQ(msg.rfind(r.key, 0), 0u) << msg;
  }
}

}  // namespace
}  // namespace deepspeed::config
