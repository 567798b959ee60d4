#include "zero/make_stage.h"

#include <cstdio>
#include <optional>
#include <string>

#include "accelerator/host_block_cache.h"
#include "deepspeed/accelerator.h"
#include "swap/aio.h"
#include "zero/flat_stage.h"
#include "zero/stage3/construction_shard.h"
#include "zero/stage3/heap_trim.h"
#include "zero/stage3/stage3.h"

namespace deepspeed::zero {
namespace {

at::ScalarType scalar_type(config::DataType t) {
  switch (t) {
    case config::DataType::kFp16:
      return at::kHalf;
    case config::DataType::kBf16:
      return at::kBFloat16;
    case config::DataType::kFp32:
      break;
  }
  return at::kFloat;
}

std::unique_ptr<Stage> make_flat_stage(const Config& config, at::ScalarType dtype,
                                       std::vector<FlatGroup>& groups, const comm::ProcessGroup& world) {
  const config::ZeroConfig& z = config.zero;
  FlatStageOptions o;
  o.stage = z.stage;
  o.dtype = dtype;
  if (const auto sixteen = sixteen_bit_gradients(config); sixteen && *sixteen == dtype) o.grad_dtype = dtype;
  // bf16/fp16 master weights: masters and (bf16_optimizer_states) the optimizer's states stay in the model's dtype
  // too (the gate admits them at stages 1 and 2).
  o.masters.model_dtype_masters = model_dtype_masters(config);
  o.reducer.bucket_elems = z.reduce_bucket_size;
  o.reducer.overlap_comm = z.overlap_comm;
  o.reducer.average = config.gradient_allreduce_op == "mean";
  o.reducer.prescale_gradients = config.prescale_gradients;
  o.reducer.gradient_predivide_factor = config.gradient_predivide_factor;
  o.reducer.comm_dtype = gradient_communication_dtype(config);
  o.reducer.reduction = z.stage == 0 || !z.reduce_scatter ? Reduction::kAllReduce
                                                          : Reduction::kReduceToOwner;
  o.masters.allgather_bucket_elems = z.allgather_bucket_size;
  o.masters.allgather_partitions = z.allgather_partitions;
  o.masters.offload_to_host = z.offload_optimizer.device == config::OffloadDevice::kCpu;
  o.masters.pin_memory = z.offload_optimizer.pin_memory;
  o.masters.external_masters = z.offload_optimizer.device == config::OffloadDevice::kNvme;
  // As at stage 3: not when a step reads the host gradients while the next backward runs (overlap_step, ZenFlow).
  o.masters.early_host_grads = o.masters.offload_to_host && !z.offload_optimizer.overlap_step && !z.zenflow;
  return std::make_unique<FlatStage>(groups, world, o);
}

std::unique_ptr<Stage> make_stage3(const Config& config, at::ScalarType dtype,
                                   const std::shared_ptr<torch::nn::Module>& module,
                                   const std::vector<FlatGroup>& groups, const comm::ProcessGroup& world) {
  const config::ZeroConfig& z = config.zero;
  const bool rank0 = comm::get_rank() == 0;
  Stage3Options so;
  so.precision.dtype = dtype;
  so.device = accelerator::get_accelerator().device();  // where the engine put the model
  // Not under the host block cache (accelerator/host_block_cache.h): the large blocks are no longer in glibc's heap.
  so.trim_heap_after_backward =
      so.device.is_cpu() && per_step_heap_trim_wanted() && !accelerator::host_block_cache_stats().installed;
  so.prefetch.prefetch_bucket_elems = z.prefetch_bucket_size;
  so.prefetch.max_live_elems = z.max_live_parameters;
  so.prefetch.max_reuse_distance = z.max_reuse_distance;
  so.prefetch.persistence_threshold = z.param_persistence_threshold;
  so.reduction.overlap_comm = z.overlap_comm;
  so.reduction.reduce_bucket_elems = z.reduce_bucket_size;
  so.reduction.prescale_gradients = config.prescale_gradients;
  so.reduction.gradient_predivide_factor = config.gradient_predivide_factor;
  so.precision.comm_dtype = gradient_communication_dtype(config);
  if (const auto sixteen = sixteen_bit_gradients(config); sixteen && *sixteen == dtype) so.precision.grad_dtype = dtype;
  so.precision.model_dtype_masters = model_dtype_masters(config);
  so.quantization.quantized_weights = z.zero_quantized_weights;
  so.quantization.quantized_gradients = z.zero_quantized_gradients;
  // Hosts are known only when the data-parallel group is the world (ranks numbered host by host).
  if (world.size() == comm::get_world_size()) so.quantization.ranks_per_node = comm::get_local_world_size();
  // (Where the secondary partitions may lie, the whole world in groups within a host: runtime::check_degrees.)
  if (z.zero_hpz_partition_size > 1) so.quantization.hpz_size = z.zero_hpz_partition_size;
  if (z.allgather_bucket_size != config::ZeroConfig{}.allgather_bucket_size && rank0)
    std::fprintf(stderr,
                 "deepspeed: note: zero_optimization.allgather_bucket_size is not used at stage 3 (as in DeepSpeed: "
                 "stage 3 gathers per unit; stage3_prefetch_bucket_size bounds what is gathered ahead)\n");
  so.offload.offload_to_host = z.offload_optimizer.device == config::OffloadDevice::kCpu;
  // Not when a step may read the host gradients while the next backward runs (overlap_step, ZenFlow), nor with
  // super_offload, whose worker takes each final gradient itself.
  so.offload.early_host_grads = so.offload.offload_to_host && !z.offload_optimizer.overlap_step &&
                                !z.offload_optimizer.super_offload && !z.zenflow;
  so.offload.pin_memory = z.offload_optimizer.pin_memory;
  so.offload.external_masters = z.offload_optimizer.device == config::OffloadDevice::kNvme;
  const config::OffloadParamConfig& op = z.offload_param;
  const config::OffloadParamConfig defaults;
  const bool nvme_keys_set = op.buffer_count != defaults.buffer_count || op.max_in_cpu != defaults.max_in_cpu;
  const char* unused_keys = nullptr;  // offload_param keys this device does not use, said once as a note
  if (op.device == config::OffloadDevice::kCpu) {
    so.offload.params_on_host = true;
    so.offload.param_pin_memory = op.pin_memory;
    if (nvme_keys_set || op.buffer_size != defaults.buffer_size)
      unused_keys = "buffer_count, buffer_size and max_in_cpu apply to device \"nvme\" (as in DeepSpeed); with device "
                    "\"cpu\" every partition is in host memory";
  }
  if (op.device == config::OffloadDevice::kNvme) {
    so.offload.param_swap_dir = op.nvme_path.value() + "/zero_stage_3/params/rank" + std::to_string(world.rank());
    so.offload.aio = swap::aio_options_from_config(config.aio);
    so.offload.param_buffer_elems = op.buffer_size;
    so.offload.param_max_in_cpu = op.max_in_cpu;
    so.offload.param_buffer_count = op.buffer_count;
    so.offload.param_swap_pin = op.pin_memory;
    DS_ASSERT(op.buffer_count >= 1, "offload_param.buffer_count 0 with nvme (the feature gate refuses it)");
    if (so.device.is_cpu() && (op.buffer_count != defaults.buffer_count || op.pin_memory != defaults.pin_memory))
      unused_keys = "buffer_count and pin_memory stage swapped partitions on their way to an accelerator; on the CPU "
                    "they are read straight into the gather buffers (stage3_max_live_parameters bounds them)";
  }
  if (rank0 && unused_keys) std::fprintf(stderr, "deepspeed: note: zero_optimization.offload_param.%s\n", unused_keys);
  std::vector<std::vector<at::Tensor>> params;
  for (const auto& g : groups) params.push_back(g.params);
  return std::make_unique<Stage3>(module, params, world, so);
}

}  // namespace

std::optional<at::ScalarType> sixteen_bit_gradients(const Config& config) {
  // data_types.grad_accum_dtype naming the model's 16-bit dtype (the gate refuses any other but fp32), or bf16 masters.
  const std::optional<at::ScalarType> model = config.bf16.enabled   ? std::optional(at::kBFloat16)
                                              : config.fp16.enabled ? std::optional(at::kHalf)
                                                                    : std::nullopt;
  if (!model) return std::nullopt;
  const auto& accum = config.data_types.grad_accum_dtype;
  if (accum && scalar_type(*accum) == *model) return model;
  if (model_dtype_masters(config)) return model;
  return std::nullopt;
}

bool model_dtype_masters(const Config& config) {
  return (config.bf16.enabled && config.bf16.bf16_master_weights_and_grads) ||
         (config.fp16.enabled && config.fp16.fp16_master_weights_and_grads);
}

at::ScalarType gradient_communication_dtype(const Config& config) {
  if (config.sequence_parallel_size > 1) return scalar_type(config.seq_parallel_communication_data_type);
  if (config.communication_data_type) return scalar_type(*config.communication_data_type);
  // 16-bit gradient buffers at stages 0 and 1 reduce in their own dtype: an fp32 wire would be a bucket-sized fp32
  // copy of each, all alive together at the boundary (a whole fp32 gradient again). Stage 2's staging stays fp32.
  if (config.zero.stage <= 1)
    if (const auto sixteen = sixteen_bit_gradients(config)) return *sixteen;
  return at::kFloat;
}

std::unique_ptr<Stage> make_stage(const Config& config, at::ScalarType dtype,
                                  const std::shared_ptr<torch::nn::Module>& module,
                                  std::vector<FlatGroup>& groups, const comm::ProcessGroup& world) {
  if (config.zero.stage == 3) return make_stage3(config, dtype, module, groups, world);
  return make_flat_stage(config, dtype, groups, world);
}

void apply(const Config& config, const std::shared_ptr<torch::nn::Module>& module) {
  const bool stage3 = config.zero.stage == 3;
  if (!stage3) materialize_construction_shards(module);
  // DeepSpeed's own warning: the key shapes stages 1-2's DeepSpeed-layout files only (checkpoint/deepspeed_export.h).
  if (stage3 && config.zero.elastic_checkpoint && comm::get_rank() == 0)
    std::fprintf(stderr, "deepspeed: warning: zero_optimization.elastic_checkpoint: ZeRO-3 elastic checkpointing is "
                         "deprecated and no longer supported (as DeepSpeed says); use the universal checkpoint\n");
}

}  // namespace deepspeed::zero
