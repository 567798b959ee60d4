// Building the engine (deepspeed::initialize): the layouts and groups it is given, the config resolved against them,
// parameter groups, the ZeRO stage, the optimizer and how its step runs (runtime/optimizer_step.h), the schedule, the
// side features. engine.cc runs the training step.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "accelerator/host_block_cache.h"
#include "config/feature_gate.h"
#include "config/initialize_rules.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/checkpointing.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "runtime/config_notes.h"
#include "runtime/engine_impl.h"
#include "runtime/layout.h"
#include "runtime/param_groups.h"
#include "runtime/scheduler_factory.h"
#include "zero/make_stage.h"

namespace deepspeed {
namespace {

void configure_host() {
  if (accelerator::get_accelerator().device().is_cpu()) accelerator::configure_host_memory(comm::get_rank() == 0);
  // Host threads: LibTorch's pool starts with 1 on Debian's build; share the cores among ranks unless the user chose.
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
  at::set_num_threads(accelerator::host_threads_per_rank(comm::get_local_world_size()));
}

comm::CommsLoggerOptions comms_logger_options(const config::CommsLoggerConfig& c) {
  comm::CommsLoggerOptions o;
  o.enabled = c.enabled;
  o.verbose = c.verbose;
  o.prof_all = c.prof_all;
  o.prof_ops = c.prof_ops;
  o.debug = c.debug;
  return o;
}

// LibTorch 1.13 has no fp16 matrix multiply on CPU; say so up front rather than leave users with LibTorch's
// "addmm_impl_cpu_ not implemented for 'Half'" from deep inside their first forward.
void warn_if_no_half_matmul(const c10::Device& device, int rank) {
  if (device.type() != c10::kCPU || rank != 0) return;
  try {
    at::Tensor a = at::ones({2, 2}, at::TensorOptions().dtype(at::kHalf));
    (void)at::mm(a, a);
  } catch (const std::exception&) {
    std::fprintf(stderr,
                 "deepspeed: warning: fp16.enabled on CPU, but this LibTorch has no fp16 matmul on CPU; models with "
                 "Linear layers will fail in LibTorch. Use \"bf16\": {\"enabled\": true} on CPU.\n");
  }
}

runtime::LossScalerOptions loss_scaler_options(const config::Fp16Config& c) {
  runtime::LossScalerOptions o;
  o.loss_scale = c.loss_scale;
  o.initial_scale_power = c.initial_scale_power;
  o.loss_scale_window = c.loss_scale_window;
  o.hysteresis = c.hysteresis;
  o.consecutive_hysteresis = c.consecutive_hysteresis;
  o.min_loss_scale = c.min_loss_scale;
  return o;
}

}  // namespace

EngineImpl::EngineImpl(std::shared_ptr<torch::nn::Module> module, const Config& config, InitializeOptions options)
    : module_(std::move(module)), config_(config) {
  DS_CHECK(module_ != nullptr, "initialize: model is null");
  if (!comm::is_initialized()) comm::init_distributed();
  layout_ = runtime::make_layout(*module_, config_, options, &norm_excluded_);
  config::AutoValues known = options.auto_values;  // "auto" in the config, filled as HF's integration does
  if (!known.total_num_steps && options.total_steps > 0) known.total_num_steps = options.total_steps;
  if (!known.model_dtype) known.model_dtype = runtime::model_data_type(*module_);
  runtime::print_config_notes(config_, config_.resolve_auto(known));
  config_.resolve_batch(layout_.batch_ranks());
  config::check_supported_features(config_);
  // The activation_checkpointing section applies to every deepspeed::checkpointing::checkpoint call from here on (a
  // later checkpointing::configure by the caller still overrides it). Settings DeepSpeed's configure() would refuse
  // are not applied, as DeepSpeed applies none unless the program calls it (its config accepts them).
  if (const std::string why = config::activation_checkpointing_problem(config_.activation_checkpointing); why.empty())
    checkpointing::configure(config_);
  else if (comm::get_rank() == 0)
    std::fprintf(stderr, "deepspeed: warning: %s; the section is not applied (call checkpointing::configure)\n",
                 why.c_str());
  config::InitializeFacts facts;  // what the optimizer's rules need besides the config
  facts.client_optimizer = options.optimizer != nullptr;
  facts.client_scheduler = options.lr_scheduler != nullptr;
  facts.whole_world = layout_.whole_world;
  config::apply_initialize_rules(config::InitializePhase::kOptimizer, config_, facts);
  dtype_ = config_.bf16.enabled ? at::kBFloat16 : config_.fp16.enabled ? at::kHalf : at::kFloat;
  configure_host();
  if (config_.seed.has_value()) accelerator::get_accelerator().manual_seed(static_cast<uint64_t>(*config_.seed));
  comm::configure_comms_logger(comms_logger_options(config_.comms_logger));
  print_comms_summary_ = config_.comms_logger.enabled && comm::get_rank() == 0;
  breakdown_ = config_.wall_clock_breakdown;
  total_steps_ = options.total_steps;
  tokens_ = runtime::TokenTally(options);
  if (config_.fp16.enabled) scaler_ = std::make_unique<runtime::LossScaler>(loss_scaler_options(config_.fp16));
  nonfinite_ = runtime::NonFiniteGuard::for_config(config_);

  zero::apply(config_, module_);  // the ZeRO stage's transform of the model
  place_on_device();
  groups_ = runtime::make_param_groups(*module_, std::move(options.param_groups));
  runtime::split_expert_groups(*module_, groups_);
  if (!options.optimizer && config_.optimizer.has_value() && config_.optimizer->type == "muon")
    runtime::split_muon_groups(module_, groups_);
  if (std::any_of(groups_.begin(), groups_.end(), [](const auto& g) { return g.group.is_member(); }))
    runtime::add_experts(layout_, config_, options);
  if (dtype_ == at::kHalf) warn_if_no_half_matmul(groups_[0].params[0].device(), comm::get_rank());
  stage_ = zero::make_stage(config_, dtype_, module_, groups_, layout_.data_parallel);
  finish_construction(options);
}

void EngineImpl::place_on_device() {
  // As DeepSpeed's engine: the model trains on this rank's device (bound by init_distributed from LOCAL_RANK);
  // parameters already there (zero::Init partitions) stay. Inputs are the caller's to move (Engine::device()).
  device_ = accelerator::get_accelerator().device();
  if (device_.is_cpu()) return;  // the model is already in host memory
  module_->to(device_);
}

void EngineImpl::check_no_expert_parallelism(const char* what) const {
  // Each expert-parallel rank holds other experts under the same local names: a single-model file written by one
  // rank would keep rank 0's and lose the rest.
  DS_CHECK(!layout_.experts, what, ": not supported with MoE expert parallelism (ep_size > 1): no rank holds "
           "every expert; save_checkpoint writes each expert's weights to its layer_<L>_expert_<E> file");
}

void EngineImpl::finish_construction(InitializeOptions& options) {
  runtime::OptimizerStepParts parts;
  parts.config = &config_;
  parts.stage = stage_.get();
  parts.groups = &groups_;
  parts.rank = layout_.data_parallel.rank();
  parts.on_accelerator = !device_.is_cpu();
  runtime::StepRequest request;
  request.client = std::move(options.optimizer);
  request.world = layout_.data_parallel;
  request.whole_tensor_clash = layout_.experts                                ? "MoE expert parallelism (ep_size > 1)"
                               : !tp::sharded_parameters(*module_).empty() ? "tensor-parallel layers"
                                                                           : nullptr;
  request.custom_layout = !layout_.whole_world;
  runtime::BuiltStep built = runtime::make_optimizer_step(parts, std::move(request));
  optimizer_ = std::move(built.optimizer);
  step_ = std::move(built.step);
  runtime::IterationParts iteration_parts{&config_, stage_.get(), &groups_, optimizer_.get(),
                                          [this] { return parameter_names_or_positions(); }, layout_.data_parallel,
                                          iteration_actions()};
  iterations_ = runtime::make_iteration_schedule(
      std::move(iteration_parts),
      runtime::IterationRequest{!config_.optimizer.has_value() && optimizer_ != nullptr, layout_.experts,
                                !layout_.whole_world});
  if (options.lr_scheduler) {
    scheduler_ = std::move(options.lr_scheduler);
  } else if (config_.scheduler.has_value()) {
    DS_ASSERT(optimizer_ != nullptr, "initialize refuses a scheduler without an optimizer");
    std::vector<double> base_lrs;
    for (size_t g = 0; g < groups_.size(); ++g) base_lrs.push_back(optimizer_->lr(g));
    scheduler_ = runtime::make_scheduler_from_config(*config_.scheduler, base_lrs);
  }
  // Every DeepSpeed scheduler writes its starting values into the optimizer when it is built (since DeepSpeed
  // 0.15.3; earlier releases left the warmup schedules' first step at the optimizer's own lr), so step 1 runs at the
  // schedule's iteration -1: warmup_min_lr (WarmupLR, WarmupDecayLR), 0 (WarmupCosineLR), lr_range_test_min_lr,
  // cycle_min_lr / cycle_min_mom (OneCycle). A client scheduler is built before initialize sees it, so the same.
  if (scheduler_ && optimizer_) {
    DS_CHECK(scheduler_->num_groups() == groups_.size(), "lr scheduler has ", scheduler_->num_groups(),
             " groups, the optimizer ", groups_.size());
    apply_schedule();
  }

  if (config_.checkpoint.save_python_layout) {
    // Refused now rather than at a save (the config's half ran in the feature gate).
    config::PythonLayoutModel built;
    built.experts = layout_.experts;
    built.whole_world = layout_.whole_world;
    built.tensor_parallel = layout_.tensor_parallel;
    built.adam_states = optimizer_ && optimizer_->name() != "muon" &&
                        optimizer_->state_names() == std::vector<std::string>({"exp_avg", "exp_avg_sq"});
    config::check_python_layout(config_, &built);
  }
  if (config_.dump_state && comm::get_rank() == 0) std::printf("deepspeed config:\n%s\n", config_.dump().c_str());
  add_observers();
  breakdown_table_.start(*stage_);  // the breakdown starts here, not with construction's gathers
}

runtime::IterationActions EngineImpl::iteration_actions() {
  runtime::IterationActions a;
  a.optimizer_step = [this] { boundary_step(); };
  a.land = [this] { land_overlapped_step(); };
  a.advance_schedule = [this] {
    if (!scheduler_) return;
    scheduler_->step();
    apply_schedule();
  };
  a.lrs = [this] { return get_lr(); };
  return a;
}

}  // namespace deepspeed
