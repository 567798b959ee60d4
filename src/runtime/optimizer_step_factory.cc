// make_optimizer_step: the one place the config chooses the optimizer and the way its step runs (optimizer_step.h):
// a client torch::optim optimizer, Lamb, Muon, the fused Adam family resident or streamed through NVMe, run in place,
// overlapped, or speculatively during backward.
#include <ATen/Parallel.h>

#include <memory>
#include <string>
#include <utility>

#include "config/feature_gate.h"
#include "config/initialize_rules.h"
#include "deepspeed/error.h"
#include "runtime/lamb_optimizer.h"
#include "runtime/muon_optimizer.h"
#include "runtime/optimizer_step.h"
#include "runtime/speculative_step.h"
#include "zero/make_stage.h"
#include "zero/stage_features.h"

namespace deepspeed::runtime {
namespace {

// The fused Adam family over resident masters. Offload with a bf16/fp16 model: the CPU kernels write the updated
// partition in the model's dtype as they go, on a CPU device straight into the parameters, on an accelerator into
// host buffers that publish() copies up. Not when it is speculative (an update that may be rolled back must not reach
// them before it is validated). An overlapped step may write the accelerator's host buffers while the next forward
// and backward run (publish() copies them when the step lands), not a CPU device's parameters, which those read
// meanwhile; nor with ZenFlow, whose selected columns change the masters between the kernel's pass and the publish.
std::unique_ptr<EngineOptimizer> fused_optimizer(const OptimizerStepParts& parts, bool overlap_step) {
  const Config& config = *parts.config;
  // bf16_optimizer_states (with bf16 masters, which the gate requires): the states in bf16 too.
  const bool bf16_states = config.bf16.enabled && config.bf16.bf16_optimizer_states;
  auto optimizer = make_fused_optimizer(*config.optimizer, *parts.groups, parts.stage->masters(),
                                        /*resident_state=*/true, bf16_states ? at::kBFloat16 : at::kFloat);
  const bool buffers_apart = parts.on_accelerator && !config.zero.zenflow;
  zero::FusedCopyBack* fusable = zero::feature<zero::FusedCopyBack>(*parts.stage);
  if (fusable && !config.zero.offload_optimizer.super_offload && (!overlap_step || buffers_apart))
    fusable->fuse_copy_back([&](const std::vector<at::Tensor>& targets) { return optimizer->set_copy_back(targets); });
  return optimizer;
}

// Gradients (and, with bf16 masters, masters and states) held in the model's dtype reach the optimizer through the
// chunked fp32 step (ResidentStep): element-wise kernels only.
void check_chunked_step(const Config& cfg, const EngineOptimizer* optimizer) {
  const auto& accum = cfg.data_types.grad_accum_dtype;
  const bool masters16 = zero::model_dtype_masters(cfg);
  const std::string key = masters16 ? std::string(cfg.bf16.enabled ? "bf16.bf16_master_weights_and_grads"
                                                                       : "fp16.fp16_master_weights_and_grads")
                                    : std::string("data_types.grad_accum_dtype \"") +
                                          config::to_string(accum.value_or(config::DataType::kFp32)) + "\"";
  DS_CHECK_T(ConfigError,
             !(masters16 || (accum && *accum != config::DataType::kFp32)) || !optimizer ||
                 optimizer->num_states() >= 0,
             key, ": the step converts the gradients to fp32 a chunk at a time, which the ",
             optimizer ? optimizer->name() : "", " optimizer cannot take (it steps whole tensors)");
}

}  // namespace

BuiltStep make_optimizer_step(OptimizerStepParts parts, StepRequest request) {
  const Config& config = *parts.config;
  config::InitializeFacts facts;  // (initialize checked these already; a direct caller gets the same refusals)
  facts.client_optimizer = request.client != nullptr;
  facts.whole_world = !request.custom_layout;
  config::apply_initialize_rules(config::InitializePhase::kOptimizer, config, facts);
  const auto& zenflow = config.zero.zenflow;
  const bool overlap_step = config.zero.offload_optimizer.overlap_step || (zenflow && zenflow->overlap_step);
  const std::string type = !request.client && config.optimizer.has_value() ? config.optimizer->type : "";
  const bool partitioned = config.zero.stage >= 1;
  BuiltStep out;
  // The feature gate refused what the config shows (nvme, overlap_step, SuperOffload); here, what the model shows.
  if (type == "lamb" || type == "muon") config::check_whole_tensor_step(type, request.whole_tensor_clash);
  if (request.client) {
    out.optimizer = wrap_client_optimizer(std::move(request.client));
  } else if (type == "lamb") {
    out.optimizer = make_lamb_optimizer(*config.optimizer, *parts.groups, parts.stage->masters(),
                                        parts.stage->master_fragments(), partitioned, request.world);
  } else if (type == "muon") {
    out.optimizer = make_muon_optimizer(*config.optimizer, *parts.groups, parts.stage->masters(),
                                        parts.stage->param_shapes(), parts.stage->master_fragments(), partitioned,
                                        request.world);
  } else if (config.zero.offload_optimizer.device == config::OffloadDevice::kNvme) {
    DS_CHECK_T(ConfigError, config.optimizer.has_value(),
               "zero_optimization.offload_optimizer: nvme offload needs an `optimizer` section");
    out.step = make_nvme_step(parts, *config.optimizer, &out.optimizer);
    check_chunked_step(config, out.optimizer.get());
    return out;
  } else if (config.optimizer.has_value()) {
    out.optimizer = fused_optimizer(parts, overlap_step);
  }
  check_chunked_step(config, out.optimizer.get());
  parts.optimizer = out.optimizer.get();
  out.step = make_resident_step(parts, overlap_step);
  if (config.zero.offload_optimizer.super_offload && out.optimizer) {
    // Without clipping or loss scaling nothing can change the step once its gradients are known (a non-finite norm
    // is stepped on all the same), so no copies are kept for a rollback.
    const bool may_roll_back = config.gradient_clipping > 0.0 || config.fp16.enabled;
    const int worker_threads =
        SpeculativeStep::share_of(at::get_num_threads(), config.zero.offload_optimizer.cpuadam_cores_perc);
    out.step = make_speculative_step(parts, std::move(out.step), may_roll_back, worker_threads);
  }
  return out;
}

}  // namespace deepspeed::runtime
