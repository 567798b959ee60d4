// PipelineEngine (include/deepspeed/pipe/engine.h): interprets the schedules' instruction streams on one stage.
// The stage's parameters, optimizer, precision and data-parallel reduction are an ordinary EngineImpl built over the
// stage's data-parallel group; this file adds what only a pipeline has: the communicator groups from the topology,
// the point-to-point traffic, the per-buffer activations, tied-weight synchronisation and the batch's loss.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "comm/mesh.h"
#include "config/feature_gate.h"
#include "config/initialize_rules.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "deepspeed/pipe/engine.h"
#include "deepspeed/pipe/schedule.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/tp/parallel_linear.h"
#include "pipe/pipeline_engine_impl.h"
#include "runtime/timers.h"

namespace deepspeed::pipe {
namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Every tied key of the whole layer list, sorted: the same on every rank.
std::vector<std::string> all_tied_keys(const PipelineModuleImpl& m) {
  std::set<std::string> keys;
  for (const auto& spec : m.options().layers)
    if (spec.tied_key()) keys.insert(*spec.tied_key());
  return {keys.begin(), keys.end()};
}

}  // namespace

PipelineEngineImpl::PipelineEngineImpl(PipelineModule module, const Config& config, InitializeOptions options)
    : module_(std::move(module)) {
  DS_CHECK(!module_.is_empty(), "pipe::initialize: module is empty");
  config::check_pipeline_features(config);
  if (!comm::is_initialized()) comm::init_distributed();
  world_ = comm::get_world_group();
  const ProcessTopology& topo = module_->topology();
  DS_CHECK(topo.world_size() == world_.size(), "pipe::initialize: the module's topology has ", topo.world_size(),
           " ranks but the world has ", world_.size());
  grid_ = pipe_grid_ranks(topo, world_.rank());
  check_topology(config, options);
  DS_ASSERT(grid_.stage_id == module_->stage_id(), "module and topology disagree on the stage");
  // The config's pipeline section: stages agree with the module (check_topology; partition and seed_layers were
  // refused above: they belong to PipelineModuleOptions); the checkpoint interval is applied here. pipe_partitioned
  // / grad_partitioned split activations over a tensor-slicing group, which a pipe x data topology does not have:
  // nothing to do for them.
  const config::PipelineConfig& pc = config.pipeline;
  if (pc.activation_checkpoint_interval > 0) module_->set_activation_checkpoint_interval(pc.activation_checkpoint_interval);
  Config stage_config = config;
  stage_config.pipeline = config::PipelineConfig{};  // consumed here
  stage_config.tensor_parallel = config::TensorParallelConfig{};  // the "model" axis: checked and laid out here
  make_groups(options);
  sync_tied_weights();
  runtime::StageEngineParts parts =
      runtime::make_stage_engine(module_.ptr(), torch::nn::AnyModule(module_), stage_config, std::move(options));
  impl_ = std::move(parts.stage);
  engine_.emplace(std::move(parts.engine));
  if (grid_.model_parallel_size > 1)
    impl_->set_tensor_slicing({grid_.model_parallel_id, grid_.model_parallel_size, tp::split_layout(*module_)});
  impl_->set_log_line_source(
      [this](const runtime::StepReport& last, double, const runtime::LogWindow::Span& window) {
        return log_line_parts(last, window);
      });
  micro_batches_ = static_cast<int>(impl_->config().gradient_accumulation_steps.value());
  buffers_.resize(static_cast<size_t>(TrainSchedule(micro_batches_, grid_.pipe_parallel_size, grid_.stage_id)
                                          .num_pipe_buffers()));
  const std::string s = std::to_string(grid_.stage_id);
  if (!grid_.is_last_stage()) {
    act_to_next_ = std::make_unique<P2PLink>(world_, grid_.next_stage_rank, "activations from stage " + s);
    grad_from_next_ = std::make_unique<P2PLink>(world_, grid_.next_stage_rank, "gradients to stage " + s);
  }
  if (!grid_.is_first_stage()) {
    act_from_prev_ = std::make_unique<P2PLink>(world_, grid_.prev_stage_rank, "activations to stage " + s);
    grad_to_prev_ = std::make_unique<P2PLink>(world_, grid_.prev_stage_rank, "gradients from stage " + s);
  }
  if (world_.rank() == 0) {
    const std::string tensor =
        grid_.model_parallel_size > 1 ? " x " + std::to_string(grid_.model_parallel_size) + " tensor-parallel" : "";
    std::printf("deepspeed: pipeline of %d stages x %d data-parallel%s ranks, %d micro-batches per step\n",
                grid_.pipe_parallel_size, grid_.data_parallel_size, tensor.c_str(), micro_batches_);
  }
}

void PipelineEngineImpl::make_groups(InitializeOptions& options) {
  const ProcessTopology& topo = module_->topology();
  // The topology's grid over the world (comm/mesh.h lays ranks out the same way: row-major, the last axis fastest).
  const comm::Mesh mesh("pipe", topo.get_dims(), "pipeline topology " + topo.to_string());
  auto axis = [&](const std::string& name) {
    const auto& names = topo.get_axis_names();
    return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  data_group_ = mesh.group({axis("data")});
  pipe_group_ = mesh.group({axis("pipe")});
  options.data_parallel_group = data_group_;
  // The ranks of one model replica (every stage and, with a "model" axis, every tensor rank) agree on the gradient
  // norm and on fp16 overflow.
  if (grid_.model_parallel_size > 1) {
    options.model_parallel_group = mesh.group({axis("pipe"), axis("model")});
  } else if (grid_.pipe_parallel_size > 1) {
    options.model_parallel_group = pipe_group_;
  }
  for (const std::string& key : all_tied_keys(*module_)) {
    const std::vector<int> stages = module_->tied_stages(key);
    if (stages.size() < 2) continue;
    // One group per (data, model) position: the tie's stages at that position.
    std::vector<std::vector<int>> lists;
    for (int d = 0; d < grid_.data_parallel_size; ++d) {
      for (int t = 0; t < grid_.model_parallel_size; ++t) {
        std::vector<int> ranks;
        for (int stage : stages) {
          AxisValues at{{"pipe", stage}, {"data", d}};
          if (topo.has_axis("model")) at.emplace_back("model", t);
          ranks.push_back(topo.get_rank(at));
        }
        lists.push_back(std::move(ranks));
      }
    }
    comm::ProcessGroup g = comm::group_from_lists("pipe.tie." + key, lists);
    if (!g.is_member()) continue;
    tie_groups_.emplace_back(key, g);
    // The first stage of the tie counts the weight in the gradient norm; the others hold copies.
    if (grid_.stage_id != stages.front())
      for (const auto& p : module_->tied_parameters(key)) options.norm_excluded_params.push_back(p);
  }
  // Tensor parallelism: weights the layers do not split are whole on every tensor rank; rank 0 of the model axis
  // counts them.
  if (grid_.model_parallel_size > 1 && grid_.model_parallel_id > 0) {
    std::set<const void*> split;
    for (const at::Tensor& p : tp::sharded_parameters(*module_)) split.insert(p.unsafeGetTensorImpl());
    for (const at::Tensor& p : module_->parameters())
      if (p.requires_grad() && split.count(p.unsafeGetTensorImpl()) == 0) options.norm_excluded_params.push_back(p);
  }
}

void PipelineEngineImpl::check_topology(const Config& config, const InitializeOptions& options) {
  // (Sequence parallelism, grad_accum_dtype, 16-bit masters: config::check_pipeline_features.)
  config::InitializeFacts facts;
  facts.caller_groups = options.data_parallel_group.is_member() || options.model_parallel_group.is_member();
  facts.pipeline_stages = grid_.pipe_parallel_size;
  facts.model_axis = grid_.model_parallel_size;
  tp::sharded_parameters(*module_, &facts.layers_split);
  facts.whole_world = false;
  if (facts.model_axis > 1)
    facts.model_axis_is_tp_group =
        tp::tensor_parallel_groups(facts.model_axis).tensor_parallel.ranks() == grid_.model_group;
  config::apply_initialize_rules(config::InitializePhase::kPipeline, config, facts);
  if (facts.model_axis > 1) tp::set_overlap_comm(*module_, config.tensor_parallel.tp_overlap_comm);
}

void PipelineEngineImpl::sync_tied_weights() {
  // Before the engine copies parameters into its buffers and masters: every stage starts from the first stage's
  // values of a tied weight.
  at::NoGradGuard no_grad;
  for (auto& [key, group] : tie_groups_)
    for (const auto& p : module_->tied_parameters(key)) group.broadcast(p, group.ranks()[0]);
}

void PipelineEngineImpl::execute(const PipeInstruction& ins, const DataIterator& data, bool train) {
  const auto start = Clock::now();
  double* bucket = &timing_.compute;
  Buffer* b = ins.buffer_id >= 0 ? &buffers_.at(static_cast<size_t>(ins.buffer_id)) : nullptr;
  switch (ins.kind) {
    case InstructionKind::kLoadMicroBatch: {
      if (!grid_.is_first_stage() && !grid_.is_last_stage()) break;
      MicroBatch mb = data();
      if (grid_.is_first_stage()) {
        DS_CHECK(mb.inputs.defined(), "pipeline: the data iterator gave the first stage no inputs");
        b->input = mb.inputs.to(accelerator::get_accelerator().device());  // as DeepSpeed's pipeline engine: batches go to the device
      }
      if (grid_.is_last_stage()) {
        DS_CHECK(mb.labels.defined(), "pipeline: the data iterator gave the last stage no labels");
        b->label = mb.labels.to(accelerator::get_accelerator().device());
      }
      break;
    }
    case InstructionKind::kForwardPass: {
      at::Tensor x = b->input;
      if (!grid_.is_first_stage() && train && x.is_floating_point()) x = x.detach().requires_grad_(true);
      b->input = x;
      impl_->begin_forward();
      at::Tensor out = module_->forward(x);
      impl_->end_forward();
      if (grid_.is_last_stage()) {
        at::Tensor loss = module_->loss(out, b->label);
        DS_CHECK(loss.numel() == 1, "pipeline: loss_fn returned a tensor of shape ", loss.sizes(), ", not a scalar");
        losses_.push_back(loss.detach().to(at::kFloat).reshape({}));
        out = loss;
      }
      b->output = out;
      if (!train) b->input = at::Tensor();
      break;
    }
    case InstructionKind::kBackwardPass: {
      at::Tensor grad = grid_.is_last_stage() ? at::Tensor() : b->grad_recv;
      impl_->backward_micro_batch(b->output, grad);
      b->output = at::Tensor();  // frees the micro-batch's graph
      break;
    }
    case InstructionKind::kSendActivation:
      bucket = &timing_.p2p;
      act_to_next_->send(b->output.detach());
      if (!train) b->output = at::Tensor();
      break;
    case InstructionKind::kRecvActivation:
      bucket = &timing_.p2p;
      b->input = act_from_prev_->recv(b->act_recv);
      break;
    case InstructionKind::kSendGrad: {
      bucket = &timing_.p2p;
      at::Tensor g = b->input.grad();
      DS_CHECK(g.defined(), "pipeline: stage ", grid_.stage_id,
               "'s input got no gradient; its layers must use their input");
      grad_to_prev_->send(g);
      b->input = at::Tensor();
      break;
    }
    case InstructionKind::kRecvGrad:
      bucket = &timing_.p2p;
      grad_from_next_->recv(b->grad_recv);
      break;
    case InstructionKind::kReduceTiedGrads:
      bucket = &timing_.reduce;
      for (auto& [key, group] : tie_groups_)
        for (const auto& p : module_->tied_parameters(key)) group.all_reduce(impl_->accumulated_grad(p));
      break;
    case InstructionKind::kReduceGrads:
      bucket = &timing_.reduce;
      impl_->reduce_gradients();
      break;
    case InstructionKind::kOptimizerStep:
      impl_->pipeline_step(micro_batches_);
      break;
  }
  *bucket += seconds_since(start);
}

at::Tensor PipelineEngineImpl::finish_loss() {
  // The last stage averages over micro-batches and data-parallel replicas, then tells the other stages.
  at::Tensor loss = at::zeros({1}, at::kFloat);
  if (grid_.is_last_stage()) {
    DS_ASSERT(!losses_.empty(), "no losses on the last stage");
    loss = at::stack(losses_).mean().reshape({1});
    if (data_group_.size() > 1) data_group_.all_reduce(loss, comm::ReduceOp::kAvg);
  }
  losses_.clear();
  if (pipe_group_.size() > 1) pipe_group_.broadcast(loss, pipe_group_.ranks().back());
  return loss.reshape({});
}

at::Tensor PipelineEngineImpl::run(const DataIterator& data, bool train) {
  DS_CHECK(static_cast<bool>(data), "pipeline: no data iterator");
  timing_ = PipelineTiming{};
  const auto start = Clock::now();
  const bool was_training = module_->is_training();
  module_->train(train);
  std::optional<at::NoGradGuard> no_grad;
  if (!train) no_grad.emplace();
  losses_.clear();
  try {
    if (train) {
      TrainSchedule schedule(micro_batches_, grid_.pipe_parallel_size, grid_.stage_id);
      for (const PipeStep& step : schedule.steps())
        for (const PipeInstruction& ins : step) execute(ins, data, train);
    } else {
      InferenceSchedule schedule(micro_batches_, grid_.pipe_parallel_size, grid_.stage_id);
      DS_ASSERT(schedule.num_pipe_buffers() <= static_cast<int>(buffers_.size()), "too few pipeline buffers");
      for (const PipeStep& step : schedule.steps())
        for (const PipeInstruction& ins : step) execute(ins, data, train);
    }
  } catch (...) {
    module_->train(was_training);
    for (auto& b : buffers_) b.input = b.output = b.label = at::Tensor();
    if (train) impl_->discard_gradients();  // the next batch must not inherit part of this one
    throw;
  }
  module_->train(was_training);
  for (auto& b : buffers_) b.input = b.output = b.label = at::Tensor();
  const auto reduce_start = Clock::now();
  at::Tensor loss = finish_loss();
  timing_.reduce += seconds_since(reduce_start);
  timing_.total = seconds_since(start);
  if (train) {
    window_.total += timing_.total;
    window_.compute += timing_.compute;
    window_.p2p += timing_.p2p;
    window_.reduce += timing_.reduce;
    // The step's report (log line, progress bar, monitors) carries the batch loss the last stage sent every stage.
    impl_->report_step(loss.item<double>());
  }
  return loss;
}

runtime::LogLineParts PipelineEngineImpl::log_line_parts(const runtime::StepReport& last,
                                                         const runtime::LogWindow::Span& window) {
  runtime::LogLineParts parts;
  parts.loss = last.loss;  // the batch loss, the same on every rank: no averaging
  // wall_clock_breakdown: this stage's batches over the window, split as PipelineTiming splits them.
  if (impl_->config().wall_clock_breakdown) {
    const PipelineTiming& w = window_;
    parts.table = runtime::format_timer_table({{"batch", 1e3 * w.total, 0},
                                               {"compute (fwd, bwd, step)", 1e3 * w.compute, 1},
                                               {"p2p (incl. waits for neighbours)", 1e3 * w.p2p, 1},
                                               {"reduce", 1e3 * w.reduce, 1}},
                                              last.global_steps, window.steps, 1e3 * w.total);
  }
  window_ = PipelineTiming{};
  char idle[48];
  std::snprintf(idle, sizeof(idle), "stage 0 idle %.0f%%", 100.0 * timing_.idle_fraction());
  parts.extra = idle;
  return parts;
}

// ---- PipelineEngine: the public handle ----

PipelineEngine::PipelineEngine(std::shared_ptr<PipelineEngineImpl> impl) : impl_(std::move(impl)) {}

at::Tensor PipelineEngine::train_batch(const DataIterator& data) { return impl_->run(data, /*train=*/true); }
at::Tensor PipelineEngine::eval_batch(const DataIterator& data) { return impl_->run(data, /*train=*/false); }
int PipelineEngine::stage_id() const { return impl_->grid_.stage_id; }
int PipelineEngine::num_stages() const { return impl_->grid_.pipe_parallel_size; }
int PipelineEngine::micro_batches() const { return impl_->micro_batches_; }
int PipelineEngine::dp_world_size() const { return impl_->grid_.data_parallel_size; }
int64_t PipelineEngine::global_steps() const { return impl_->engine_->global_steps(); }
std::vector<double> PipelineEngine::get_lr() const { return impl_->engine_->get_lr(); }
double PipelineEngine::get_global_grad_norm() const { return impl_->engine_->get_global_grad_norm(); }
double PipelineEngine::loss_scale() const { return impl_->engine_->loss_scale(); }
int64_t PipelineEngine::skipped_steps() const { return impl_->engine_->skipped_steps(); }
const PipelineTiming& PipelineEngine::last_timing() const { return impl_->timing_; }
PipelineModule PipelineEngine::module() const { return impl_->module_; }
const Engine& PipelineEngine::stage_engine() const { return *impl_->engine_; }

PipelineEngine initialize(PipelineModule module, const Config& config, InitializeOptions options) {
  return PipelineEngine(std::make_shared<PipelineEngineImpl>(std::move(module), config, std::move(options)));
}

}  // namespace deepspeed::pipe
