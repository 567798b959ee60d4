#include "runtime/feature_gate.h"

#include <string>

#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

void reject_if(bool on, const std::string& key, const std::string& what) {
  DS_CHECK_T(ConfigError, !on, key, ": ", what, " is not implemented in this build of deepspeed-cpp yet");
}

}  // namespace

void check_supported_features(const config::Config& cfg) {
  const auto& z = cfg.zero;
  reject_if(z.stage != 0, "zero_optimization.stage",
            "ZeRO stage " + std::to_string(z.stage) + " (stage 0, plain data parallelism, is available)");
  reject_if(z.offload_optimizer.enabled(), "zero_optimization.offload_optimizer", "optimizer offload");
  reject_if(z.offload_param.enabled(), "zero_optimization.offload_param", "parameter offload");
  reject_if(cfg.fp16.enabled, "fp16.enabled", "fp16 mixed precision with loss scaling");
  reject_if(cfg.bf16.enabled, "bf16.enabled", "bf16 mixed precision");
  reject_if(cfg.communication_data_type.has_value() && *cfg.communication_data_type != config::DataType::kFp32,
            "communication_data_type", "reducing gradients in a lower precision");
  reject_if(cfg.data_types.grad_accum_dtype.has_value() &&
                *cfg.data_types.grad_accum_dtype != config::DataType::kFp32,
            "data_types.grad_accum_dtype", "accumulating gradients in a lower precision");
  reject_if(cfg.sparse_gradients, "sparse_gradients", "sparse gradient all-reduce");
  reject_if(cfg.graph_harvesting, "graph_harvesting", "CUDA graph harvesting");
  reject_if(cfg.pipeline.stages.has_value() && *cfg.pipeline.stages > 1, "pipeline.stages",
            "pipeline parallelism");
  const auto& ac = cfg.activation_checkpointing;
  reject_if(ac.partition_activations || ac.cpu_checkpointing || ac.contiguous_memory_optimization,
            "activation_checkpointing", "activation checkpointing");
  reject_if(cfg.monitor.tensorboard.enabled, "tensorboard.enabled", "the TensorBoard monitor");
  reject_if(cfg.monitor.csv_monitor.enabled, "csv_monitor.enabled", "the CSV monitor");
  reject_if(cfg.monitor.wandb.enabled, "wandb.enabled", "the Weights & Biases monitor");
  reject_if(cfg.flops_profiler.enabled, "flops_profiler.enabled", "the flops profiler");
  reject_if(cfg.autotuning.enabled, "autotuning.enabled", "the autotuner");
  reject_if(cfg.checkpoint.load_universal, "checkpoint.load_universal", "universal checkpoint loading");
}

}  // namespace deepspeed::runtime
