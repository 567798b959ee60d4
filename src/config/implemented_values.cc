// Keys DeepSpeed has and deepspeed-cpp parses, whose value selects behaviour we implement only one
// way. Each is accepted at the value that says what we do (the field's default, which is
// DeepSpeed's default except where noted in the headers) and refused by name at the other, so a
// config never asks for something it silently does not get. Keys that change nothing by nature
// (logging hints, partitioning over an axis we refuse) are not here: README.md lists them.
// Stateless; thread-safe.
#include "config/sections.h"

namespace deepspeed::config {
namespace {

void refuse_if(bool refused, const std::string& path, const std::string& message) {
  if (refused) fail_at(path, message);
}

void check_zero(const ZeroConfig& z) {
  const std::string p = "zero_optimization.";
  refuse_if(z.use_multi_rank_bucket_allreduce && (z.stage == 1 || z.stage == 2) && z.reduce_scatter,
            p + "use_multi_rank_bucket_allreduce",
            "true (all-reduce each bucket across ranks) is not implemented: deepspeed-cpp reduces "
            "each rank's slice of a bucket to its owner; set false or remove the key");
  refuse_if(!z.load_from_fp32_weights, p + "load_from_fp32_weights",
            "false (rebuild the fp32 masters from the 16-bit weights on load) is not implemented: "
            "deepspeed-cpp restores the saved fp32 masters; set true or remove the key");
  refuse_if(!z.ignore_unused_parameters, p + "ignore_unused_parameters",
            "false (fail when a parameter gets no gradient) is not implemented: deepspeed-cpp "
            "treats such gradients as zero; set true or remove the key");
  refuse_if(!z.memory_efficient_linear && z.stage == 3, p + "memory_efficient_linear",
            "false is not implemented: stage 3 always releases the gathered weights autograd "
            "saved and gathers them again for backward; set true or remove the key");
  refuse_if(z.pipeline_loading_checkpoint, p + "pipeline_loading_checkpoint",
            "true (load checkpoints one local rank after another) is not implemented; set false "
            "or remove the key");
  refuse_if(z.override_module_apply && z.stage == 3, p + "override_module_apply",
            "true is not implemented: deepspeed-cpp cannot intercept torch::nn::Module::apply, so "
            "apply() on a stage-3 model sees this rank's partitions; initialize weights in the "
            "zero::shard factory instead and set false or remove the key");
  refuse_if(z.enable_sanity_checks, p + "enable_sanity_checks",
            "true (DeepSpeed's extra stage-3 consistency checks) is not implemented; set false "
            "or remove the key");
  refuse_if(z.parameter_alignment, p + "parameter_alignment",
            "true (pad the flat buffers so each parameter starts 16-byte aligned) is not implemented; set false "
            "or remove the key");
  refuse_if(!z.leaf_module_names.empty() || !z.leaf_module_name_suffixes.empty(), p + "leaf_module",
            "names and name_suffixes are not implemented: mark those modules as stage-3 units with zero::shard "
            "(each unit is gathered whole); remove them");
  refuse_if(z.mics_hierarchical_params_gather, p + "mics_hierarchical_params_gather",
            "true is not implemented: deepspeed-cpp has no MiCS sharding (DeepSpeed 0.19 removed "
            "it too); remove the key");
}

void check_data_types(const Config& c) {
  const DataTypesConfig& d = c.data_types;
  const DataType training = c.bf16.enabled ? DataType::kBf16 : c.fp16.enabled ? DataType::kFp16 : DataType::kFp32;
  refuse_if(d.param_dtype && *d.param_dtype != training, "data_types.param_dtype",
            std::string("\"") + (d.param_dtype ? to_string(*d.param_dtype) : "") +
                "\" is not implemented: the parameters train in the fp16/bf16 section's dtype (" +
                to_string(training) + " here); set that or remove the key");
  refuse_if(d.buffer_dtype.has_value(), "data_types.buffer_dtype",
            "casting the model's buffers to a dtype of their own is not implemented; remove the key");
  refuse_if(d.keep_in_fp32_modules && !d.keep_in_fp32_modules->empty(), "data_types.keep_in_fp32_modules",
            "a list of modules to keep in fp32 is not implemented; use \"auto\" (a C++ model has no "
            "transformers list, so nothing is kept) or []");
}

}  // namespace

void check_implemented_values(const Config& c) {
  check_zero(c.zero);
  check_data_types(c);
  refuse_if(!c.managed_gradient_accumulation, "managed_gradient_accumulation",
            "false (the caller manages gradient accumulation) is not implemented: the engine accumulates over "
            "gradient_accumulation_steps itself; set true or remove the key");
  refuse_if(c.aio.use_gds, "aio.use_gds",
            "true needs GPUDirect Storage, which deepspeed-cpp does not have; set false or remove "
            "the key");
  refuse_if(c.checkpoint.tag_validation != TagValidation::kFail, "checkpoint.tag_validation",
            std::string("\"") + to_string(c.checkpoint.tag_validation) +
                "\" is not implemented: deepspeed-cpp always checks that every rank saves the same "
                "tag and fails if not (\"Fail\"); set \"Fail\" or remove the key");
  refuse_if(c.checkpoint.use_node_local_storage, "checkpoint.use_node_local_storage",
            "true (each node writes its own copy) is not implemented: global rank 0 writes the "
            "model states to a shared directory; set false or remove the key");
  refuse_if(c.checkpoint.parallel_write_pipeline_stage, "checkpoint.parallel_write.pipeline_stage",
            "true (spread a stage's layer files over its data-parallel ranks) is not implemented: "
            "data-parallel rank 0 of each stage writes them; set false or remove the key");
  refuse_if(!c.dataloader_drop_last, "dataloader_drop_last",
            "false is not implemented: deepspeed-cpp has no engine-built data loader, and "
            "DataParallelSampler always drops the last partial global batch; set true or remove "
            "the key");
  refuse_if(c.use_data_before_expert_parallelism, "use_data_before_expert_parallelism",
            "true is not implemented: expert-parallel groups are consecutive ranks (DeepSpeed's "
            "default layout); set false or remove the key");
  // zero_allow_untested_optimizer true and zero_force_ds_cpu_optimizer false only permit, in DeepSpeed, a client
  // optimizer beside ZeRO (offloaded, for the second); by themselves they change nothing, as here. A client
  // optimizer passed to initialize() beside ZeRO is refused there by name (runtime::check_client_optimizer).
  // optimizer.params.torch_adam true picks torch.optim.Adam's implementation over DeepSpeed's fused one: the same
  // update (to rounding), which our fused kernel computes either way.
}

}  // namespace deepspeed::config
