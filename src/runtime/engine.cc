// deepspeed::initialize and the Engine's training step: forward, backward with overlapped bucketed gradient
// reduction, and the boundary step (overflow check, unscale, clip, optimizer on this rank's partition, parameter
// all-gather, LR schedule, zero grads, log), for ZeRO stages 0-2 in fp32, bf16 and fp16.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "deepspeed/accelerator.h"
#include "deepspeed/checkpointing.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "runtime/engine_impl.h"
#include "runtime/feature_gate.h"
#include "moe/expert_params.h"
#include "monitor/monitor.h"
#include "runtime/scheduler_factory.h"
#include "zero/stage3/construction_shard.h"

namespace deepspeed {
namespace {

std::vector<runtime::FlatGroup> make_groups(torch::nn::Module& module, std::vector<ParamGroup> given) {
  std::vector<runtime::FlatGroup> groups;
  if (given.empty()) {
    runtime::FlatGroup g;
    std::unordered_set<const void*> seen;  // tied weights appear once
    for (const auto& p : module.parameters(/*recurse=*/true))
      if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) g.params.push_back(p);
    DS_CHECK(!g.params.empty(), "initialize: the model has no parameters that require a gradient");
    groups.push_back(std::move(g));
    return groups;
  }
  for (auto& pg : given) {
    runtime::FlatGroup g;
    g.params = std::move(pg.params);
    g.lr = pg.lr;
    g.weight_decay = pg.weight_decay;
    groups.push_back(std::move(g));
  }
  return groups;
}

// Moves MoE expert parameters (of ep_size > 1) out of `groups` into groups of their own, one per group and
// ep_size, reduced over their expert-data-parallel ranks (moe/expert_params.h). Groups left empty are dropped.
void split_expert_groups(torch::nn::Module& module, std::vector<runtime::FlatGroup>& groups) {
  std::vector<moe::ExpertParams> experts = moe::find_expert_params(module);
  if (experts.empty()) return;
  std::unordered_map<const void*, size_t> which;  // parameter -> entry of `experts`
  for (size_t e = 0; e < experts.size(); ++e)
    for (const auto& p : experts[e].params) which[p.unsafeGetTensorImpl()] = e;
  std::vector<runtime::FlatGroup> dense, expert;
  for (auto& g : groups) {
    std::vector<runtime::FlatGroup> split(experts.size());
    runtime::FlatGroup rest;
    for (auto& p : g.params) {
      auto it = which.find(p.unsafeGetTensorImpl());
      (it == which.end() ? rest : split[it->second]).params.push_back(p);
    }
    for (size_t e = 0; e < split.size(); ++e) {
      if (split[e].params.empty()) continue;
      split[e].group = experts[e].group;
      split[e].lr = g.lr;
      split[e].weight_decay = g.weight_decay;
      expert.push_back(std::move(split[e]));
    }
    if (rest.params.empty()) continue;
    rest.lr = g.lr;
    rest.weight_decay = g.weight_decay;
    dense.push_back(std::move(rest));
  }
  groups = std::move(dense);
  for (auto& g : expert) groups.push_back(std::move(g));
}

void configure_threads() {
  // LibTorch's intra-op pool starts with 1 thread on Debian's build; share this host's cores among its ranks,
  // unless the user chose a count explicitly.
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

EngineImpl::~EngineImpl() {
  if (!print_comms_summary_) return;
  try {
    std::printf("Communication summary of rank 0 (comms_logger):\n");
    comm::log_summary(/*print=*/true);
  } catch (...) {  // never throw from a destructor; the summary is a courtesy
  }
}

EngineImpl::EngineImpl(std::shared_ptr<torch::nn::Module> module, const Config& config, InitializeOptions options)
    : module_(std::move(module)), config_(config) {
  DS_CHECK(module_ != nullptr, "initialize: model is null");
  if (!comm::is_initialized()) comm::init_distributed();
  world_ = options.data_parallel_group.is_member() ? options.data_parallel_group : comm::get_world_group();
  if (options.model_parallel_group.is_member() && options.model_parallel_group.size() > 1)
    model_parallel_ = options.model_parallel_group;
  norm_excluded_ = options.norm_excluded_params;
  DS_CHECK_T(ConfigError, norm_excluded_.empty() || model_parallel_.is_member(),
             "initialize: norm_excluded_params needs a model_parallel_group of more than one rank");
  DS_CHECK_T(ConfigError, !model_parallel_.is_member() || config_.zero.stage <= 1,
             "initialize: a model_parallel_group works with zero_optimization.stage 0 or 1, got ", config_.zero.stage);
  config::AutoValues known = options.auto_values;  // "auto" in the config, filled as HF's integration does
  if (!known.total_num_steps && options.total_steps > 0) known.total_num_steps = options.total_steps;
  config_.resolve_auto(known);
  config_.resolve_batch(world_.size());
  runtime::check_supported_features(config_);
  // The activation_checkpointing section applies to every deepspeed::checkpointing::checkpoint call from here on (a
  // later checkpointing::configure by the caller still overrides it).
  checkpointing::configure(config_);
  DS_CHECK_T(ConfigError, !(options.optimizer && config_.optimizer.has_value()),
             "optimizer: the config names an optimizer and initialize() was given one too; remove one");
  DS_CHECK_T(ConfigError, !(options.lr_scheduler && config_.scheduler.has_value()),
             "scheduler: the config names a scheduler and initialize() was given one too; remove one");
  const int stage = config_.zero.stage;
  dtype_ = config_.bf16.enabled ? at::kBFloat16 : config_.fp16.enabled ? at::kHalf : at::kFloat;
  DS_CHECK_T(ConfigError, !options.optimizer || (stage == 0 && dtype_ == at::kFloat),
             "optimizer: a client torch::optim optimizer steps the model's own parameters, so it works only with "
             "zero_optimization.stage 0 in fp32; name the optimizer in the config instead");
  configure_threads();
  if (config_.seed.has_value()) accelerator::get_accelerator().manual_seed(static_cast<uint64_t>(*config_.seed));
  comm::configure_comms_logger(comms_logger_options(config_.comms_logger));
  print_comms_summary_ = config_.comms_logger.enabled && comm::get_rank() == 0;
  breakdown_ = config_.wall_clock_breakdown;
  total_steps_ = options.total_steps;
  DS_CHECK(options.tokens_per_sample >= 0, "InitializeOptions::tokens_per_sample must be >= 0, got ",
           options.tokens_per_sample);
  tokens_per_sample_ = options.tokens_per_sample;
  if (total_steps_ > 0 && comm::get_rank() == 0 && runtime::progress_bar_wanted(::isatty(STDOUT_FILENO) == 1))
    progress_ = std::make_unique<runtime::ProgressBar>(total_steps_, tokens_per_sample_,
                                                       config_.train_batch_size.value());
  if (config_.fp16.enabled) scaler_ = std::make_unique<runtime::LossScaler>(loss_scaler_options(config_.fp16));

  // Units partitioned at construction (zero::Init) are taken over by stage 3; other stages train them whole.
  if (stage < 3) zero::materialize_construction_shards(module_);
  groups_ = make_groups(*module_, std::move(options.param_groups));
  split_expert_groups(*module_, groups_);
  has_experts_ = std::any_of(groups_.begin(), groups_.end(), [](const auto& g) { return g.group.is_member(); });
  DS_CHECK_T(ConfigError, !has_experts_ || stage <= 2,
             "zero_optimization.stage: MoE expert parallelism (ep_size > 1) works with stages 0-2, got ", stage);
  DS_CHECK_T(ConfigError, !has_experts_ || (!model_parallel_.is_member() && !options.data_parallel_group.is_member()),
             "initialize: MoE expert parallelism (ep_size > 1) is not supported inside a pipeline or another "
             "data-parallel layout; its groups are formed over the whole world");
  DS_CHECK_T(ConfigError, !has_experts_ || (!options.optimizer && !options.lr_scheduler),
             "initialize: a client optimizer or LR scheduler sees one parameter group where the engine keeps the "
             "MoE experts (ep_size > 1) in groups of their own; name the optimizer and scheduler in the config");
  DS_CHECK_T(ConfigError, !has_experts_ || config_.zero.offload_optimizer.device != config::OffloadDevice::kNvme,
             "zero_optimization.offload_optimizer.device: nvme is not supported with MoE expert parallelism "
             "(ep_size > 1); use \"cpu\" or none");
  if (dtype_ == at::kHalf) warn_if_no_half_matmul(groups_[0].params[0].device(), comm::get_rank());
  if (stage == 3) {
    build_stage3();
  } else {
    build_flat_stages();
  }
  finish_construction(options);
}

void EngineImpl::check_no_expert_parallelism(const char* what) const {
  // Each expert-parallel rank holds other experts under the same local names: a single-model file written by one
  // rank would keep rank 0's and lose the rest.
  DS_CHECK(!has_experts_, what, ": not supported with MoE expert parallelism (ep_size > 1): no rank holds "
           "every expert; save_checkpoint writes each expert's weights to its layer_<L>_expert_<E> file");
}

void EngineImpl::build_flat_stages() {
  const int stage = config_.zero.stage;
  runtime::FlattenOptions fo;
  fo.dtype = dtype_;
  fo.partitioned = stage >= 1;
  fo.group = world_;
  fo.full_grads = stage < 2;
  runtime::flatten_into(groups_, fo);
  // Every rank starts from rank 0's parameters, whatever its own initialization drew.
  // (Experts from the first rank of their own group: other expert-parallel ranks hold other experts.)
  for (auto& g : groups_) {
    comm::ProcessGroup copies = runtime::copies_group(g, world_);
    if (copies.size() > 1) copies.broadcast(g.params_flat, /*src=*/copies.ranks()[0]);
  }

  runtime::GradReducerOptions ro;
  ro.bucket_elems = config_.zero.reduce_bucket_size;
  ro.overlap_comm = config_.zero.overlap_comm;
  ro.prescale_gradients = config_.prescale_gradients;
  ro.gradient_predivide_factor = config_.gradient_predivide_factor;
  ro.storage = stage == 2 ? runtime::GradStorage::kPartitioned
               : dtype_ == at::kFloat ? runtime::GradStorage::kViews
                                      : runtime::GradStorage::kAccumulate;
  ro.reduction = stage == 0 || !config_.zero.reduce_scatter ? runtime::Reduction::kAllReduce
                                                            : runtime::Reduction::kReduceToOwner;
  reducer_ = std::make_unique<runtime::GradReducer>(groups_, world_, ro);

  runtime::MasterWeightsOptions mo;
  mo.partitioned = stage >= 1;
  mo.allgather_bucket_elems = config_.zero.allgather_bucket_size;
  mo.allgather_partitions = config_.zero.allgather_partitions;
  mo.offload_to_host = config_.zero.offload_optimizer.device == config::OffloadDevice::kCpu;
  mo.pin_memory = config_.zero.offload_optimizer.pin_memory;
  mo.external_masters = config_.zero.offload_optimizer.device == config::OffloadDevice::kNvme;
  masters_ = std::make_unique<runtime::MasterWeights>(groups_, world_, mo);
}

void EngineImpl::build_stage3() {
  zero::Stage3Options so;
  so.dtype = dtype_;
  so.prefetch_bucket_elems = config_.zero.prefetch_bucket_size;
  so.max_live_elems = config_.zero.max_live_parameters;
  so.max_reuse_distance = config_.zero.max_reuse_distance;
  so.persistence_threshold = config_.zero.param_persistence_threshold;
  so.overlap_comm = config_.zero.overlap_comm;
  so.reduce_bucket_elems = config_.zero.reduce_bucket_size;
  so.prescale_gradients = config_.prescale_gradients;
  so.gradient_predivide_factor = config_.gradient_predivide_factor;
  if (config_.zero.allgather_bucket_size != config::ZeroConfig{}.allgather_bucket_size && comm::get_rank() == 0)
    std::fprintf(stderr,
                 "deepspeed: note: zero_optimization.allgather_bucket_size is not used at stage 3 (as in DeepSpeed: "
                 "stage 3 gathers per unit; stage3_prefetch_bucket_size bounds what is gathered ahead)\n");
  so.offload_to_host = config_.zero.offload_optimizer.device == config::OffloadDevice::kCpu;
  so.pin_memory = config_.zero.offload_optimizer.pin_memory;
  so.external_masters = config_.zero.offload_optimizer.device == config::OffloadDevice::kNvme;
  const auto& op = config_.zero.offload_param;
  if (op.device == config::OffloadDevice::kNvme) {
    so.param_swap_dir = op.nvme_path.value() + "/zero_stage_3/params/rank" + std::to_string(world_.rank());
    so.aio = swap::aio_options_from_config(config_.aio);
    so.param_buffer_elems = op.buffer_size;
    const config::OffloadParamConfig defaults;
    if (comm::get_rank() == 0 && (op.buffer_count != defaults.buffer_count || op.max_in_cpu != defaults.max_in_cpu ||
                               op.pin_memory != defaults.pin_memory))
      std::fprintf(stderr,
                   "deepspeed: note: zero_optimization.offload_param.buffer_count, max_in_cpu and pin_memory are not used: "
                   "partitions are read straight into the gather buffers (stage3_max_live_parameters bounds them)\n");
  }
  std::vector<std::vector<at::Tensor>> params;
  for (const auto& g : groups_) params.push_back(g.params);
  stage3_ = std::make_unique<zero::Stage3>(module_, params, world_, so);
}

void EngineImpl::finish_construction(InitializeOptions& options) {
  const bool nvme = config_.zero.offload_optimizer.device == config::OffloadDevice::kNvme;
  if (options.optimizer) {
    optimizer_ = runtime::wrap_client_optimizer(std::move(options.optimizer));
  } else if (nvme) {
    DS_CHECK_T(ConfigError, config_.optimizer.has_value(),
               "zero_optimization.offload_optimizer: nvme offload needs an `optimizer` section");
    build_nvme_optimizer(*config_.optimizer);
  } else if (config_.optimizer.has_value()) {
    optimizer_ = runtime::make_fused_optimizer(*config_.optimizer, groups_,
                                               stage3_ ? stage3_->masters() : masters_->masters());
    // Offload with a bf16/fp16 model: the CPU kernels write the updated partition straight into the parameters.
    if (masters_) masters_->fuse_copy_back(*optimizer_);
  }
  if (options.lr_scheduler) {
    scheduler_ = std::move(options.lr_scheduler);
  } else if (config_.scheduler.has_value()) {
    DS_CHECK_T(ConfigError, optimizer_ != nullptr, "scheduler: a scheduler needs an optimizer to drive");
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

  if (config_.dump_state && comm::get_rank() == 0) std::printf("deepspeed config:\n%s\n", config_.dump().c_str());
  monitor_ = std::make_unique<monitor::MonitorMaster>(config_, comm::get_rank());
  if (config_.flops_profiler.enabled && comm::get_rank() == 0) {  // DeepSpeed profiles on global rank 0 only
    profiling::TrainingInfo sizes;
    sizes.world_size = comm::get_world_size();
    sizes.dp_world_size = config_.dp_world_size;
    sizes.mp_world_size = model_parallel_.is_member() ? model_parallel_.size() : 1;
    sizes.micro_batch_size = config_.train_micro_batch_size_per_gpu.value();
    sizes.samples_per_iter = config_.train_batch_size.value();
    flops_profiler_ = std::make_unique<profiling::StepProfiler>(module_, config_.flops_profiler, sizes);
    if (stage3_) {
      // Released parameters are empty between uses: count their full shapes (DeepSpeed's ds_numel).
      auto full = std::make_shared<std::unordered_map<const c10::TensorImpl*, int64_t>>();
      const auto shapes = parameter_shapes();
      for (size_t g = 0; g < groups_.size() && g < shapes.size(); ++g)
        for (size_t i = 0; i < groups_[g].params.size() && i < shapes[g].size(); ++i)
          (*full)[groups_[g].params[i].unsafeGetTensorImpl()] = c10::multiply_integers(shapes[g][i]);
      flops_profiler_->set_parameter_numel([full](const at::Tensor& p) {
        auto it = full->find(p.unsafeGetTensorImpl());
        return it == full->end() ? p.numel() : it->second;
      });
    }
  }
  autotuning_ = runtime::AutotuningProbe::create(config_.autotuning, config_.train_batch_size.value(),
                                                comm::get_rank() == 0, module_);
  if (autotuning_) {
    // Every parameter of the model, frozen ones too (they take memory), at its full size (ZeRO-3
    // holds partitions); the trainable ones are those in the optimizer's groups.
    std::unordered_map<const c10::TensorImpl*, int64_t> full;
    const auto shapes = parameter_shapes();
    int64_t trainable = 0;
    for (size_t g = 0; g < groups_.size() && g < shapes.size(); ++g)
      for (size_t i = 0; i < groups_[g].params.size() && i < shapes[g].size(); ++i) {
        const int64_t n = c10::multiply_integers(shapes[g][i]);
        full[groups_[g].params[i].unsafeGetTensorImpl()] = n;
        trainable += n;
      }
    int64_t total = 0;
    for (const auto& p : module_->parameters()) {
      auto it = full.find(p.unsafeGetTensorImpl());
      total += it != full.end() ? it->second : p.numel();
    }
    autotuning_->report_model_info(total, trainable);
  }
  last_log_time_ = std::chrono::steady_clock::now();
  last_step_time_ = last_log_time_;
  if (stage3_) logged_waits_ = stage3_->stats();  // the breakdown starts here, not with construction's gathers
}

void EngineImpl::check_states_resident(const char* what) const {
  DS_CHECK(!offloader_.offloaded(), what, ": the model states are offloaded (offload_states()); call reload_states() "
           "first");
}

void EngineImpl::offload_states(const OffloadStatesOptions& options) {
  auto wanted = [&](OffloadStateType t) {
    return options.include.empty() ||
           std::find(options.include.begin(), options.include.end(), t) != options.include.end();
  };
  std::vector<at::Tensor> tensors;
  auto add = [&](const std::vector<at::Tensor>& ts) { tensors.insert(tensors.end(), ts.begin(), ts.end()); };
  if (wanted(OffloadStateType::kOptimStates) && optimizer_) add(optimizer_->state_tensors());
  if (stage3_) {
    if (wanted(OffloadStateType::kHpParams)) add(stage3_->masters());
    if (wanted(OffloadStateType::kLpParams)) add(stage3_->shard_buffers());
    if (wanted(OffloadStateType::kLpGrads)) add(stage3_->partition_grads());
  } else {
    if (wanted(OffloadStateType::kHpParams) && masters_) add(masters_->masters());
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (wanted(OffloadStateType::kLpParams)) add({groups_[g].params_flat});
      if (wanted(OffloadStateType::kLpGrads)) add({reducer_->partition_grads(g)});
    }
  }
  offloader_.offload(tensors, options.pin_memory);
}

void EngineImpl::profile(const std::function<void(profiling::StepProfiler&)>& call) {
  if (!flops_profiler_) return;
  try {
    call(*flops_profiler_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepspeed: flops_profiler turned off: %s\n", e.what());
    flops_profiler_.reset();
  }
}

void EngineImpl::begin_forward() {
  check_states_resident("forward");
  profile([&](profiling::StepProfiler& p) { p.begin_forward(global_steps_); });
  if (autotuning_) autotuning_->begin_forward(global_steps_);
  if (breakdown_) timers_.start("fwd");
  if (stage3_) stage3_->begin_forward();
}

void EngineImpl::end_forward() {
  if (stage3_) stage3_->end_forward();
  if (breakdown_) timers_.stop("fwd");
  if (autotuning_) autotuning_->end_forward();
  profile([&](profiling::StepProfiler& p) { p.end_forward(); });
}

void EngineImpl::backward(const at::Tensor& loss) {
  DS_CHECK(loss.defined() && loss.numel() == 1, "backward: expected a scalar loss, got ",
           loss.defined() ? loss.sizes() : at::IntArrayRef{});
  DS_CHECK(module_->is_training(), "backward: the engine is in eval mode; call engine.train() first");
  check_states_resident("backward");
  profile([&](profiling::StepProfiler& p) { p.begin_backward(); });
  if (breakdown_) timers_.start("bwd");
  const double factor = (scaler_ ? scaler_->loss_scale() : 1.0) /
                        static_cast<double>(config_.gradient_accumulation_steps.value());
  at::Tensor scaled = factor != 1.0 ? loss * factor : loss;
  if (stage3_) {
    stage3_->begin_backward();
    scaled.backward();
    stage3_->finish_backward();
  } else {
    runtime::ensure_grad_views(groups_);
    reducer_->begin_backward(is_boundary());
    scaled.backward();
    reducer_->finish_backward();
  }
  const double value = loss.item<double>();
  loss_sum_ += value;
  ++loss_count_;
  step_loss_sum_ += value;
  ++step_loss_count_;
  if (breakdown_) timers_.stop("bwd");
  profile([&](profiling::StepProfiler& p) { p.end_backward(); });
}

void EngineImpl::step() {
  check_states_resident("step");
  const bool boundary = is_boundary();
  profile([&](profiling::StepProfiler& p) { p.begin_step(); });
  ++micro_steps_;
  if (!boundary) {
    profile([&](profiling::StepProfiler& p) { p.end_step(false, global_steps_); });
    return;
  }
  boundary_step();
  const double step_loss = step_loss_count_ > 0 ? step_loss_sum_ / step_loss_count_ : 0.0;
  if (monitor_->enabled()) write_monitor_events(step_loss);
  step_loss_sum_ = 0.0;
  step_loss_count_ = 0;
  if (config_.steps_per_print > 0 && global_steps_ % config_.steps_per_print == 0) log_step();
  if (progress_) progress_->on_step(global_steps_, step_loss);
  if (autotuning_) autotuning_->after_step(global_steps_);
  profile([&](profiling::StepProfiler& p) { p.end_step(true, global_steps_); });
}

void EngineImpl::write_monitor_events(double loss) {
  // DeepSpeed's event names and step (global samples).
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_step_time_).count();
  last_step_time_ = now;
  const int64_t samples = global_steps_ * config_.train_batch_size.value();
  std::vector<monitor::Event> events;
  auto add = [&](const char* name, double value) { events.push_back({std::string("Train/Samples/") + name, value, samples}); };
  add("train_loss", loss);
  add("lr", get_lr().at(0));
  if (scaler_) add("loss_scale", scaler_->loss_scale());
  if (global_grad_norm_ >= 0) add("grad_norm", global_grad_norm_);
  if (seconds > 0) {
    const double samples_per_sec = static_cast<double>(config_.train_batch_size.value()) / seconds;
    add("samples_per_sec", samples_per_sec);
    if (tokens_per_sample_ > 0) add("tokens_per_sec", samples_per_sec * static_cast<double>(tokens_per_sample_));
  }
  add("memory_allocated_mb",
      static_cast<double>(accelerator::get_accelerator().memory_stats().allocated_bytes) / (1024.0 * 1024.0));
  monitor_->write_events(events);
}

void EngineImpl::boundary_step() {
  DS_CHECK(optimizer_ != nullptr, "step: no optimizer (the config has no `optimizer` section and none was passed "
                                  "to initialize)");
  if (breakdown_) timers_.start("step");
  const bool stepped = take_model_step();
  if (stepped && scheduler_) {
    scheduler_->step();
    apply_schedule();
  }
  if (stage3_) {
    stage3_->zero_grads();
  } else {
    runtime::zero_grads(groups_);
    reducer_->zero_partition_grads();
  }
  ++global_steps_;
  if (breakdown_) timers_.stop("step");
}

void EngineImpl::build_nvme_optimizer(const config::OptimizerConfig& cfg) {
  const auto& oo = config_.zero.offload_optimizer;
  std::vector<at::Tensor> initial;
  for (size_t g = 0; g < groups_.size(); ++g)
    initial.push_back(stage3_ ? stage3_->initial_master(g) : masters_->initial_master(g));
  optimizer_ = runtime::make_fused_optimizer(cfg, groups_, initial, /*resident_state=*/false);
  swap::OptimizerSwapperOptions so;
  so.dir = oo.nvme_path.value() + "/zero_stage_" + std::to_string(config_.zero.stage) + "/optimizer/rank" +
           std::to_string(world_.rank());
  so.num_states = optimizer_->num_states();
  so.sub_group_size = config_.zero.sub_group_size;
  so.buffer_count = oo.buffer_count;
  so.pipeline = oo.pipeline();
  so.aio = swap::aio_options_from_config(config_.aio);
  swapper_ = std::make_unique<swap::OptimizerSwapper>(so, initial);
}

bool EngineImpl::take_model_step() {
  std::vector<at::Tensor> grads;
  if (stage3_) {
    grads = stage3_->stage_grads();  // offload: the CPU optimizer reads host copies
  } else {
    for (size_t g = 0; g < groups_.size(); ++g) grads.push_back(reducer_->partition_grads(g));
    grads = masters_->stage_grads(grads);  // offload: the CPU optimizer reads host copies
  }
  double unscale = 1.0;
  if (scaler_) {
    // The scale that produced these gradients; update() may grow it for the next window.
    const double used_scale = scaler_->loss_scale();
    auto overflow = stage3_ ? stage3_->first_overflow(grads) : masters_->first_overflow(grads);
    std::string name = overflow ? parameter_name(overflow->first, overflow->second) : "";
    // Every part of the model replica skips or steps together.
    const bool any_overflow = agree_overflow(overflow.has_value());
    if (any_overflow && !overflow) name = "a parameter of another model-parallel rank";
    if (scaler_->update(any_overflow, name)) {
      if (comm::get_rank() == 0) {
        std::printf("%s\n", scaler_->last_message().c_str());
        std::fflush(stdout);
      }
      global_grad_norm_ = std::numeric_limits<double>::infinity();
      return false;
    }
    unscale = 1.0 / used_scale;
  }
  global_grad_norm_ = model_parallel_.is_member() ? replica_grad_norm(grads) * unscale
                     : (stage3_ ? stage3_->global_norm(grads) : masters_->global_norm(grads)) * unscale;
  double coef = unscale;
  const double clip = config_.gradient_clipping;
  if (clip > 0.0) {
    const double clip_coef = clip / (global_grad_norm_ + 1e-6);
    if (clip_coef < 1.0) coef *= clip_coef;
  }
  if (coef != 1.0)
    for (auto& g : grads) g.mul_(coef);
  if (swapper_) {
    // ZeRO-Infinity: stream each sub-group's master and states through the swap buffers.
    optimizer_->begin_step();
    swapper_->step([&](size_t g, int64_t offset, const at::Tensor& master, const std::vector<at::Tensor>& states) {
      at::Tensor first = states.size() > 0 ? states[0] : at::Tensor();
      at::Tensor second = states.size() > 1 ? states[1] : at::Tensor();
      // bf16/fp16 parameters: the kernel writes them in its pass (DeepSpeed's fused fp16_param copy).
      const at::Tensor copy = stage3_ ? stage3_->copy_back_slice(g, offset, master.numel())
                                      : masters_->copy_back_slice(g, offset, master.numel());
      optimizer_->step_slice(g, master, grads[g].narrow(0, offset, master.numel()), first, second, copy);
      if (!copy.defined()) write_master_slice(g, offset, master);
    });
  } else if (stage3_) {
    optimizer_->step(stage3_->masters(), grads);
  } else {
    optimizer_->step(masters_->masters(), grads);
  }
  if (stage3_) {
    stage3_->publish();
  } else {
    masters_->publish();
  }
  return true;
}

void EngineImpl::write_master_slice(size_t group, int64_t offset, const at::Tensor& master) {
  if (stage3_) {
    stage3_->write_slice(group, offset, master);
  } else {
    masters_->write_slice(group, offset, master);
  }
}

std::string EngineImpl::parameter_name(size_t group, size_t index) const {
  const at::Tensor& p = groups_.at(group).params.at(index);
  for (const auto& item : module_->named_parameters(/*recurse=*/true))
    if (item.value().unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return item.key();
  return "group " + std::to_string(group) + " parameter " + std::to_string(index);
}

void EngineImpl::apply_schedule() {
  const auto& lrs = scheduler_->get_lr();
  for (size_t g = 0; g < lrs.size() && g < groups_.size(); ++g) optimizer_->set_lr(g, lrs[g]);
  if (const auto& mom = scheduler_->get_momentum()) {
    for (size_t g = 0; g < mom->size() && g < groups_.size(); ++g) optimizer_->set_momentum(g, (*mom)[g]);
  }
}

void EngineImpl::log_step() {
  // The mean loss across ranks over the logging window: one small all-reduce, at print steps only.
  at::Tensor loss = at::tensor({loss_count_ > 0 ? loss_sum_ / loss_count_ : 0.0}, at::kDouble);
  if (world_.size() > 1) world_.all_reduce(loss, comm::ReduceOp::kAvg);
  loss_sum_ = 0.0;
  loss_count_ = 0;
  auto now = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(now - last_log_time_).count();
  const int64_t steps = global_steps_ - last_log_step_;
  double samples = static_cast<double>(steps * config_.train_batch_size.value());
  last_log_time_ = now;
  last_log_step_ = global_steps_;
  const std::string timers = breakdown_ ? timer_table(steps) : "";
  if (world_.rank() != 0) return;
  std::string progress;
  std::string eta;
  if (total_steps_ > 0) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "/%lld (%.0f%%)", static_cast<long long>(total_steps_),
                  100.0 * global_steps_ / total_steps_);
    progress = buf;
    // From this window's pace: (steps left) x (seconds per step).
    if (steps > 0 && seconds > 0)
      eta = " | ETA " + runtime::format_eta(static_cast<double>(std::max<int64_t>(0, total_steps_ - global_steps_)) *
                                            seconds / static_cast<double>(steps));
  }
  std::string lrs;
  for (double lr : get_lr()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.4g", lrs.empty() ? "" : ",", lr);
    lrs += buf;
  }
  std::string fp16;
  if (scaler_) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " | loss_scale %g | skipped %lld", scaler_->loss_scale(),
                  static_cast<long long>(scaler_->skipped_steps()));
    fp16 = buf;
  }
  const double samples_per_sec = seconds > 0 ? samples / seconds : 0.0;
  std::string tokens;
  if (tokens_per_sample_ > 0) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), " | %.0f tokens/s", samples_per_sec * static_cast<double>(tokens_per_sample_));
    tokens = buf;
  }
  if (progress_) progress_->clear_line();
  std::printf("step %lld%s | loss %.4f | lr [%s] | grad_norm %.4f%s | %.1f samples/s%s%s\n%s",
              static_cast<long long>(global_steps_), progress.c_str(), loss.item<double>(), lrs.c_str(),
              global_grad_norm_, fp16.c_str(), samples_per_sec, tokens.c_str(), eta.c_str(), timers.c_str());
  std::fflush(stdout);
}

std::string EngineImpl::timer_table(int64_t steps) {
  // Backward's reduction share: time the reducer kept backward waiting (stages 0-2), or stage 3's waits for its
  // gradient reductions; both are cumulative counters, read as the difference since the last table.
  const zero::Stage3Stats s3 = stage3_ ? stage3_->stats() : zero::Stage3Stats{};
  const double reduce_total = stage3_ ? s3.reduce_wait_ms : reducer_ ? reducer_->blocked_ms() : 0.0;
  const double reduce = reduce_total - logged_waits_.reduce_wait_ms;
  const double fwd = timers_.elapsed_ms("fwd"), bwd = timers_.elapsed_ms("bwd"), step = timers_.elapsed_ms("step");
  std::vector<runtime::TimerRow> rows = {{"forward", fwd, 0},
                                         {"backward", bwd, 0},
                                         {"compute", std::max(0.0, bwd - reduce), 1},
                                         {"reduce (blocked)", reduce, 1},
                                         {"step", step, 0}};
  if (stage3_) {
    // Parts of forward and backward: gathers of parameters needed at once, and what prefetching did not hide.
    rows.push_back({"stage 3 gather (on demand, in fwd/bwd)", s3.gather_ms - logged_waits_.gather_ms, 0});
    rows.push_back({"stage 3 prefetch wait (in fwd/bwd)", s3.prefetch_wait_ms - logged_waits_.prefetch_wait_ms, 0});
  }
  logged_waits_ = s3;
  logged_waits_.reduce_wait_ms = reduce_total;
  timers_.reset();
  return runtime::format_timer_table(rows, global_steps_, steps, fwd + bwd + step);
}

std::vector<double> EngineImpl::get_lr() const {
  std::vector<double> lrs;
  if (optimizer_)
    for (size_t g = 0; g < groups_.size(); ++g) lrs.push_back(optimizer_->lr(g));
  return lrs;
}

std::vector<at::Tensor> EngineImpl::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

ModelStateBytes EngineImpl::model_state_bytes() const {
  ModelStateBytes b;
  if (stage3_) {
    b.params = stage3_->param_bytes();
    b.gradients = stage3_->grad_bytes();
    b.master_weights = stage3_->master_copy_bytes();
    b.optimizer_states = optimizer_ ? optimizer_->state_bytes() : 0;
    if (swapper_) b.optimizer_states = swapper_->resident_bytes();  // masters and states stream through this pool
    b.working_buffers = stage3_->working_bytes();
    if (stage3_->offloaded())
      b.offloaded_to_host = b.master_weights + b.optimizer_states + stage3_->host_grad_bytes();
    return b;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    b.params += groups_[g].params_flat.nbytes();
    b.gradients += groups_[g].grads_flat.defined() ? groups_[g].grads_flat.nbytes()
                                                   : reducer_->partition_grads(g).nbytes();
  }
  b.master_weights = masters_->copy_bytes();
  b.optimizer_states = optimizer_ ? optimizer_->state_bytes() : 0;
  if (swapper_) b.optimizer_states = swapper_->resident_bytes();  // masters and states stream through this pool
  b.working_buffers = reducer_->staging_bytes();
  if (masters_->offloaded()) b.offloaded_to_host = b.master_weights + b.optimizer_states + masters_->host_grad_bytes();
  return b;
}

// ---- Engine: the public handle ----

Engine::Engine(torch::nn::AnyModule module, std::shared_ptr<EngineImpl> impl)
    : module_(std::move(module)), impl_(std::move(impl)) {}

void Engine::begin_forward() { impl_->begin_forward(); }
void Engine::end_forward() { impl_->end_forward(); }
void Engine::backward(const at::Tensor& loss) { impl_->backward(loss); }
void Engine::step() { impl_->step(); }
void Engine::train(bool on) { impl_->module_->train(on); }
bool Engine::is_training() const { return impl_->module_->is_training(); }
bool Engine::is_gradient_accumulation_boundary() const { return impl_->is_boundary(); }
int64_t Engine::global_steps() const { return impl_->global_steps_; }
int64_t Engine::micro_steps() const { return impl_->micro_steps_; }
int64_t Engine::global_samples() const { return impl_->global_samples(); }
std::vector<double> Engine::get_lr() const { return impl_->get_lr(); }
double Engine::get_global_grad_norm() const { return impl_->global_grad_norm_; }
double Engine::loss_scale() const { return impl_->scaler_ ? impl_->scaler_->loss_scale() : 1.0; }
int64_t Engine::skipped_steps() const { return impl_->scaler_ ? impl_->scaler_->skipped_steps() : 0; }
int Engine::zero_optimization_stage() const { return impl_->config_.zero.stage; }
ModelStateBytes Engine::model_state_bytes() const { return impl_->model_state_bytes(); }
void Engine::offload_states(const OffloadStatesOptions& options) { impl_->offload_states(options); }
void Engine::reload_states() { impl_->offloader_.reload(); }
int64_t Engine::offloaded_state_bytes() const { return impl_->offloader_.offloaded_bytes(); }
zero::Stage3Stats Engine::stage3_stats() const {
  return impl_->stage3_ ? impl_->stage3_->stats() : zero::Stage3Stats{};
}
void Engine::reset_stage3_peaks() {
  if (impl_->stage3_) impl_->stage3_->reset_peaks();
}
int Engine::local_rank() const { return comm::get_local_rank(); }
int Engine::global_rank() const { return comm::get_rank(); }
int Engine::world_size() const { return comm::get_world_size(); }
int Engine::dp_world_size() const { return impl_->config_.dp_world_size; }
int64_t Engine::train_batch_size() const { return impl_->config_.train_batch_size.value(); }
int64_t Engine::train_micro_batch_size_per_gpu() const {
  return impl_->config_.train_micro_batch_size_per_gpu.value();
}
int64_t Engine::gradient_accumulation_steps() const { return impl_->config_.gradient_accumulation_steps.value(); }
const Config& Engine::config() const { return impl_->config_; }
std::vector<at::Tensor> Engine::parameters() const { return impl_->parameters(); }

Engine initialize(torch::nn::AnyModule model, const Config& config, InitializeOptions options) {
  DS_CHECK(!model.is_empty(), "initialize: model is empty");
  auto impl = std::make_shared<EngineImpl>(model.ptr(), config, std::move(options));
  return Engine(std::move(model), std::move(impl));
}

}  // namespace deepspeed
