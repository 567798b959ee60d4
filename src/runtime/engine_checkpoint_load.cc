// Engine::load_checkpoint: the checkpoint loader (checkpoint/load_plan.h) reads and checks a tag saved by any number
// of ranks at any ZeRO stage, in any of the formats it knows, for what this engine holds; the engine applies the plan
// once every rank's was made. No rank applies anything until every rank's checks pass, so every rank fails alike and
// the engine keeps its state. The model-dtype parameters are then refreshed from the masters (a collective), exactly
// as after an optimizer step, which is why a resumed run is bit-exact.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdio>

#include "checkpoint/load_plan.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/tp/partition.h"
#include "moe/expert_params.h"
#include "runtime/rank_agreement.h"
#include "runtime/engine_impl.h"
#include "runtime/state_sections.h"

namespace deepspeed {

namespace ckpt = checkpoint;

namespace {

// A resume at another global batch goes on after the samples consumed, and says where that is.
void report_batch_change(const ckpt::LoadPlan& plan, int64_t batch) {
  const int64_t samples = plan.global_samples;
  std::printf(
      "deepspeed: load_checkpoint: %s was saved at global batch %lld, this run's is %lld: resuming after sample %lld "
      "(global_samples(); %s), at step %lld\n",
      plan.path.c_str(), static_cast<long long>(plan.saved_batch), static_cast<long long>(batch),
      static_cast<long long>(samples),
      samples % batch == 0 ? ("data step " + std::to_string(samples / batch) + " at the new batch").c_str()
                           : "not a whole number of new global batches",
      static_cast<long long>(plan.global_steps));
  std::fflush(stdout);
}

}  // namespace

// The sections of the model file this engine's components own, read and checked before anything is applied.
struct EngineImpl::LoadedSections {
  std::optional<runtime::LossScaler::State> scaler;
  std::optional<runtime::LrSchedulerState> scheduler;
  std::optional<c10::impl::GenericDict> iterations;  // the iteration schedule's
};

ckpt::LoadTarget EngineImpl::load_request(const std::string& dir, const LoadCheckpointOptions& options) const {
  ckpt::LoadTarget t;
  t.dir = dir;
  if (options.tag && !options.tag->empty()) t.tag = options.tag;
  t.universal = config_.checkpoint.load_universal;
  t.name_map = options.checkpoint_name_map;
  t.mp_rank = mp_rank();
  t.rank = layout_.data_parallel.rank();
  t.world_size = layout_.data_parallel.size();
  return t;
}

void EngineImpl::describe_model(ckpt::LoadTarget& t, const LoadCheckpointOptions& options) const {
  t.refuse_python_tags = layout_.experts;
  // A tensor-parallel engine takes its slices of a universal tag's whole parameters, whatever tensor size saved them.
  runtime::TensorSlicing slicing = tensor_slicing();
  t.tensor_parallel_size = slicing.size;
  t.tensor_size_checked = pipeline_slicing_.size > 1;
  if (slicing.size > 1)
    t.slicer = [s = std::move(slicing)](const std::string& name, const at::Tensor& whole) {
      auto it = s.layout.find(name);
      return it == s.layout.end() ? whole : tp::slice_split(whole, it->second.first, it->second.second, s.rank, s.size);
    };
  t.fragments = master_fragments();
  t.names = parameter_names();
  t.shapes = parameter_shapes();
  if (layout_.experts) t.other_ranks_names = moe::expert_names(*module_).all;
  t.may_hold_more = t.universal && layout_.model_parallel.is_member();
  for (const auto& item : module_->named_buffers(/*recurse=*/true))
    if (item.value().defined()) t.buffers.emplace_back(item.key(), item.value());
  t.full = !options.load_module_only;
  if (t.full && options.load_optimizer_states && optimizer_)
    t.optimizer = ckpt::LoadTarget::Optimizer{optimizer_->name(), optimizer_->state_names(),
                                              !optimizer_->archive().empty()};
  if (t.full && scaler_) t.sections.push_back(runtime::kLossScalerSection);
  if (t.full && options.load_lr_scheduler_states && scheduler_) t.sections.push_back(runtime::kSchedulerSection);
  if (const char* key = iterations_->section_key(); t.full && key) t.sections.push_back(key);
  t.train_batch_size = config_.train_batch_size.value();
}

EngineImpl::LoadedSections EngineImpl::read_sections(const ckpt::LoadPlan& plan) const {
  LoadedSections out;
  const auto where = [&](const char* key) { return "checkpoint file " + plan.model_file + ": " + key; };
  if (auto it = plan.sections.find(runtime::kLossScalerSection); it != plan.sections.end())
    out.scaler = runtime::read_loss_scaler_section(it->second, *scaler_, where(runtime::kLossScalerSection));
  if (auto it = plan.sections.find(runtime::kSchedulerSection); it != plan.sections.end())
    out.scheduler = runtime::read_scheduler_section(it->second, *scheduler_, where(runtime::kSchedulerSection));
  if (const char* key = iterations_->section_key()) {
    if (auto it = plan.sections.find(key); it != plan.sections.end()) {
      // The schedule goes on from the saved iteration count.
      DS_CHECK_T(ckpt::CheckpointError, plan.micro_steps.has_value(), "checkpoint file ", plan.model_file,
                 " has no 'micro_steps'");
      iterations_->check_section(it->second, plan.model_file);
      out.iterations = it->second;
    }
  }
  return out;
}

std::optional<LoadCheckpointResult> EngineImpl::load_checkpoint(const std::string& dir,
                                                                const LoadCheckpointOptions& options) {
  check_states_resident("load_checkpoint");
  check_boundary("load_checkpoint");
  land_overlapped_step();  // its thread would write masters the load is about to replace
  ckpt::LoadTarget target = load_request(dir, options);
  if (ckpt::nothing_to_load(target)) return std::nullopt;
  // Each rank checks the checksums of the records it copies from, so one rank may fail where the others pass: the
  // collective ending this phase makes every rank throw before any of them applies anything.
  ckpt::LoadPlan plan;
  LoadedSections sections;
  runtime::all_ranks_or_none(layout_.data_parallel, "load_checkpoint", [&] {
    describe_model(target, options);
    plan = ckpt::plan_load(target);
    sections = read_sections(plan);
  });
  // Collective too, so an I/O error of offloaded state fails every rank alike.
  runtime::all_ranks_or_none(layout_.data_parallel, "load_checkpoint", [&] {
    const bool lrs_restored = apply_model_and_optimizer(plan);
    if (target.full) resume_training_state(plan, sections, lrs_restored);
  });
  // Collective: every rank's restored masters into the parameters, as after an optimizer step.
  stage_->restore_from_masters();
  if (!target.full) iterations_->resume_module_only(micro_steps_);
  iterations_->after_restore();
  if (layout_.data_parallel.rank() == 0) {
    std::printf("loaded checkpoint %s\n", plan.path.c_str());
    std::fflush(stdout);
  }
  LoadCheckpointResult result;
  result.path = plan.path;
  if (plan.client_state) result.client_state = *plan.client_state;
  return result;
}

bool EngineImpl::apply_model_and_optimizer(const ckpt::LoadPlan& plan) {
  at::NoGradGuard no_grad;
  CheckpointState live = checkpoint_state();
  ckpt::copy_masters(plan, live.masters, live.states);
  commit_checkpoint_state(live);
  for (const auto& [ours, saved] : plan.buffers) ours.copy_(saved);
  if (!plan.optimizer) return false;
  const ckpt::SavedOptimizer& saved = *plan.optimizer;
  optimizer_->set_step_count(saved.step);
  const auto hyper = saved.group_hyperparameters(groups_.size());
  if (hyper)
    for (size_t g = 0; g < groups_.size(); ++g) {
      optimizer_->set_lr(g, (*hyper)[g].first);
      if ((*hyper)[g].second) optimizer_->set_momentum(g, *(*hyper)[g].second);
    }
  if (saved.archive.defined()) {
    at::Tensor bytes = saved.archive.contiguous();
    optimizer_->restore_archive(
        std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel())));
  }
  return hyper.has_value();
}

void EngineImpl::resume_training_state(const ckpt::LoadPlan& plan, const LoadedSections& sections,
                                       bool lrs_restored) {
  const int64_t batch = config_.train_batch_size.value();
  global_steps_ = plan.global_steps;
  steps_at_load_ = plan.global_steps;
  samples_at_load_ = plan.global_samples;
  if (plan.saved_batch != batch && layout_.data_parallel.rank() == 0) report_batch_change(plan, batch);
  micro_steps_ = iterations_->resume(plan.global_steps, plan.micro_steps, sections.iterations, plan.model_file);
  micro_steps_at_load_ = micro_steps_;
  // Losses and clocks of steps before the load belong to no step after it.
  step_loss_sum_ = at::Tensor();
  step_loss_count_ = 0;
  observers_.on_resume(plan.global_steps);
  if (sections.scaler) scaler_->load_state(*sections.scaler);
  if (sections.scheduler) {
    scheduler_->load_state_dict(*sections.scheduler);
    if (!lrs_restored) apply_schedule();  // the schedule's values at the restored position
  }
  if (plan.rng.defined()) accelerator::get_accelerator().set_rng_state(plan.rng);
}

}  // namespace deepspeed
