// The `zero_optimization` section: ZeRO stage, bucket sizes, stage-3 prefetch / persistence limits,
// and CPU / NVMe offload of optimizer state and parameters.
//
// Field names follow DeepSpeed's DeepSpeedZeroConfig (e.g. `prefetch_bucket_size`, whose JSON key
// is `stage3_prefetch_bucket_size`; both spellings are accepted as in DeepSpeed). Defaults equal
// DeepSpeed's, except where a field says otherwise: a key whose value selects behaviour we
// implement one way only defaults to that way, and the other value is refused by name
// (src/config/implemented_values.cc). Deprecated keys (`cpu_offload`, `cpu_offload_param`,
// `cpu_offload_use_pin_memory`, `stage3_gather_fp16_weights_on_model_save`) are accepted and mapped
// onto their replacements.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace deepspeed::config {

enum class OffloadDevice { kNone, kCpu, kNvme };
const char* to_string(OffloadDevice device);  // "none", "cpu", "nvme"

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;  // required when device is nvme
  int buffer_count = 4;
  bool pin_memory = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;  // fraction of optimizer states offloaded; < 1 only with stage 3
  // deepspeed-cpp's key (ZenFlow's overlap_step without its top-k selection): with device "cpu", the CPU optimizer
  // step of step t runs on a background thread during step t+1's forward and backward, which therefore see the
  // parameters of step t-1 (one step stale). Off by default.
  bool overlap_step = false;
  // DeepSpeed's SuperOffload (speculative CPU step, rolled back when clipping or an overflow says so): parsed so a
  // config naming it is refused by name (feature_gate.cc), not taken for a typo.
  bool super_offload = false;
  double cpuadam_cores_perc = 0.8;

  // DeepSpeed derives `pipeline` from the two flags.
  bool pipeline() const { return pipeline_read || pipeline_write; }
  bool enabled() const { return device != OffloadDevice::kNone; }
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;  // required when device is nvme
  int buffer_count = 5;
  int64_t buffer_size = 100000000;  // 1e8 elements
  int64_t max_in_cpu = 1000000000;  // 1e9 elements
  bool pin_memory = false;

  bool enabled() const { return device != OffloadDevice::kNone; }
};

// DeepSpeed's `zero_optimization.zenflow` section (ZenFlow, runtime/zenflow/zenflow_config.py): with optimizer offload
// to CPU, the top-k most important input columns of each 2-D weight (and every 1-D parameter) are updated at every
// iteration by a selective AdamW on the training device, while the rest take the CPU optimizer's step every
// `update_interval` iterations on their accumulated gradients (overlapped with training when `overlap_step`).
struct ZenFlowConfig {
  double topk_ratio = 0.1;             // share of each weight's columns selected, in (0, 1)
  std::string select_strategy = "auto";  // "auto" (= "epoch", interval 1), "step" or "epoch"
  std::optional<int64_t> select_interval;  // nullopt: "auto"
  std::optional<int64_t> update_interval;  // nullopt: "auto" (the adaptive window)
  bool overlap_step = false;
  bool offload = false;                // selective optimizer states in host memory (refused)
  double auto_ratio = 0.99;            // used by update_interval "auto" only
  int64_t full_warm_up_rounds = 0;     // iterations that update every parameter on the CPU, before selection starts
  std::optional<double> pt_reserved_cores_perc;  // core pinning between training and optimizer (refused when set)
  // Iterations per epoch, for select_strategy "epoch"/"auto" (DeepSpeed takes it from its dataloader; without one it
  // selects once, after the warm-up, as here without this key).
  std::optional<int64_t> steps_per_epoch;
};

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;  // 5e8 elements
  // DeepSpeed's default is true; deepspeed-cpp reduces each rank's slice of a bucket to its owner
  // (false), and refuses true where it would apply (stages 1 and 2 with reduce_scatter).
  bool use_multi_rank_bucket_allreduce = false;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;  // 5e8 elements
  // DeepSpeed's default is "true for stage 3, false otherwise"; resolved at load time.
  bool overlap_comm = false;
  // false: stages 1 and 2 skip the global gradient norm at each step (one pass over the gradients and one
  // all-reduce fewer). DeepSpeed's rules (config/feature_gate.cc): stages 1-2 only, gradient_clipping 0, no
  // optimizer offload (so no ZenFlow), not stage 1 with bf16 and data_types.grad_accum_dtype fp32.
  bool compute_grad_norm = true;
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  OffloadParamConfig offload_param;
  OffloadOptimizerConfig offload_optimizer;
  int64_t sub_group_size = 1000000000;  // 1e9 elements

  // Stage-3 knobs (JSON keys carry the `stage3_` prefix).
  int64_t prefetch_bucket_size = 50000000;                                    // 5e7
  int64_t param_persistence_threshold = 100000;                               // 1e5
  int64_t model_persistence_threshold = std::numeric_limits<int64_t>::max();  // sys.maxsize
  int64_t max_live_parameters = 1000000000;                                   // 1e9
  int64_t max_reuse_distance = 1000000000;                                    // 1e9
  bool gather_16bit_weights_on_model_save = false;
  int64_t module_granularity_threshold = 0;
  bool use_all_reduce_for_fetch_params = false;
  bool allgather_sequential = false;

  bool ignore_unused_parameters = true;
  bool legacy_stage1 = false;
  bool round_robin_gradients = false;
  int zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  int mics_shard_size = -1;
  bool mics_hierarchical_params_gather = false;
  bool memory_efficient_linear = true;
  bool pipeline_loading_checkpoint = false;
  // DeepSpeed's default is true; Module::apply cannot be intercepted in C++, so true is refused at
  // stage 3.
  bool override_module_apply = false;
  bool log_trace_cache_warnings = false;
  bool enable_sanity_checks = false;
  // DeepSpeed's `zenflow` section, when present (runtime/zenflow.h).
  std::optional<ZenFlowConfig> zenflow;
  // DeepSpeed 0.19. parameter_alignment true (16-byte-aligned parameters in the flat buffers) is refused;
  // save_muon_momentum_buffer_in_memory matters only for Muon with nvme offload, which is refused; leaf_module's
  // classes name Python classes (no C++ module has one), its names and name_suffixes are refused (mark such
  // modules as stage-3 units with zero::shard).
  bool parameter_alignment = false;
  bool save_muon_momentum_buffer_in_memory = false;
  std::vector<std::string> leaf_module_classes, leaf_module_names, leaf_module_name_suffixes;

  bool enabled() const { return stage > 0; }
};

}  // namespace deepspeed::config
