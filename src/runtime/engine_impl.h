// The engine's state and training step behind deepspeed::Engine (include/deepspeed/deepspeed.h). The engine
// orchestrates; the ZeRO stage (zero/stage.h), optimizers, loss scaling, schedules, timers and reporting live in
// their own files.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/lr_schedules.h"
#include "runtime/breakdown_table.h"
#include "runtime/console_observer.h"
#include "runtime/iteration_schedule.h"
#include "runtime/layout.h"
#include "runtime/loss_scaler.h"
#include "runtime/nonfinite_guard.h"
#include "runtime/offload_states.h"
#include "runtime/optimizer.h"
#include "runtime/optimizer_step.h"
#include "runtime/side_features.h"
#include "runtime/stage_engine.h"
#include "runtime/step_observer.h"
#include "runtime/timers.h"
#include "runtime/token_tally.h"
#include "zero/deferred_reduction.h"
#include "zero/flat_params.h"
#include "zero/stage.h"

namespace deepspeed {

namespace checkpoint {
struct LoadTarget;
struct LoadPlan;
}  // namespace checkpoint

// The Engine handle (engine_handle.cc) is the public face of this class and reads its state directly; the pipeline
// engine sees it through runtime::StageEngine only.
class EngineImpl : public runtime::StageEngine {
  friend class Engine;

 public:
  EngineImpl(std::shared_ptr<torch::nn::Module> module, const Config& config, InitializeOptions options);
  // With comms_logger enabled, global rank 0 prints the communication summary (comm::log_summary) here: the end
  // of training for the usual script.
  ~EngineImpl() override;

  void begin_forward() override;
  void end_forward() override;
  void backward(const at::Tensor& loss);
  void step();
  void offload_states(const OffloadStatesOptions& options);
  void check_states_resident(const char* what) const;
  // engine_checkpoint.cc
  std::string save_checkpoint(const std::string& dir, const std::optional<std::string>& tag,
                              const std::optional<checkpoint::StateDict>& client_state, bool save_latest) override;
  std::optional<LoadCheckpointResult> load_checkpoint(const std::string& dir,
                                                      const LoadCheckpointOptions& options) override;
  bool save_16bit_model(const std::string& dir, const std::string& file_name);

  // ---- runtime::StageEngine: for the pipeline engine (src/pipe/), which drives micro-batches itself
  // (engine_pipe.cc) ----
  const Config& config() const override { return config_; }
  int64_t global_steps() const override { return global_steps_; }
  void backward_micro_batch(const at::Tensor& output, const at::Tensor& grad) override;
  void reduce_gradients() override;
  at::Tensor accumulated_grad(const at::Tensor& p) const override;
  void pipeline_step(int64_t micro_batches) override;
  void discard_gradients() override;
  void report_step(double loss) override;
  void set_tensor_slicing(runtime::TensorSlicing slicing) override { pipeline_slicing_ = std::move(slicing); }
  // The pipeline engine takes over the log line and keeps its own wall-clock breakdown: this engine stops timing (its
  // timers would only grow, never printed).
  void set_log_line_source(runtime::LogLineSource source) override {
    log_line_source_ = std::move(source);
    breakdown_ = false;
  }

  // This engine's model-parallel rank (its pipeline stage), which its checkpoint files are named by.
  int mp_rank() const { return layout_.model_parallel.is_member() ? layout_.model_parallel.rank() : 0; }

  // The micro-step ends a window of the iteration schedule (gradient accumulation's, or another schedule's).
  bool is_boundary() const;
  std::vector<double> get_lr() const;
  std::vector<at::Tensor> parameters() const;
  ModelStateBytes model_state_bytes() const;

 private:
  std::shared_ptr<torch::nn::Module> module_;
  Config config_;
  runtime::Layout layout_;  // the ranks and groups this engine trains over (runtime/layout.h)
  at::ScalarType dtype_ = at::kFloat;  // the model's compute dtype
  c10::Device device_ = c10::Device(c10::kCPU);  // where the model trains (the accelerator's device)
  std::vector<zero::FlatGroup> groups_;
  // The ZeRO stage (zero/stage.h): gradients, masters, partitioning and optimizer offload live behind it.
  std::unique_ptr<zero::Stage> stage_;
  std::unique_ptr<runtime::EngineOptimizer> optimizer_;
  std::shared_ptr<runtime::LrScheduler> scheduler_;
  std::unique_ptr<runtime::LossScaler> scaler_;  // fp16 only
  std::unique_ptr<runtime::NonFiniteGuard> nonfinite_;  // bf16 / fp32 where DeepSpeed skips a non-finite step
  // How the boundary's update runs (runtime/optimizer_step.h: in place, in fp32 chunks, streamed, overlapped, ...);
  // an overlapped one is landed by land_overlapped_step(). Declared after what it reads, so it is destroyed (waited
  // for) first.
  std::unique_ptr<runtime::OptimizerStep> step_;
  bool schedule_pending_ = false;  // the scheduler moved while a step ran: its values go in when the step lands
  // Waits for the overlapped step, publishes its masters to the parameters and applies a pending schedule.
  // Collective (publish gathers partitions): every rank calls it at the same points.
  void land_overlapped_step();
  // How iterations group into optimizer steps and what runs around them (runtime/iteration_schedule.h).
  std::unique_ptr<runtime::IterationSchedule> iterations_;
  runtime::Timers timers_;
  runtime::StateOffloader offloader_;
  int64_t micro_steps_ = 0;
  int64_t global_steps_ = 0;
  // Samples consumed (DeepSpeed's global_samples): those a loaded checkpoint had consumed at its global step, plus
  // this run's global batch per step since (engine_checkpoint.cc), so a resume at another batch keeps counting.
  int64_t samples_at_load_ = 0;
  int64_t steps_at_load_ = 0;
  int64_t micro_steps_at_load_ = 0;  // a schedule may count samples by iteration
  int64_t global_samples() const;
  int64_t total_steps_ = 0;
  double global_grad_norm_ = -1.0;

  runtime::TokenTally tokens_;  // InitializeOptions::tokens_per_sample, count_trained_tokens
  bool print_comms_summary_ = false;

  // The side features (console, monitors, flops profiler, autotuning probe) as observers of every step
  // (step_observer.h); engine_report.cc builds them.
  runtime::StepObservers observers_;
  void add_observers();
  // Each trainable parameter's full element count by its TensorImpl (ZeRO-3 leaves released parameters empty).
  using FullNumels = runtime::FullNumels;
  FullNumels full_numels() const;
  // The StepReport of the optimizer step just taken, with `loss` as the observers get it.
  runtime::StepReport step_report(double loss);  // closes the step's token tally (a collective when counting)
  // The engine's part of the console's log line: the window's loss averaged over ranks, the breakdown table.
  runtime::LogLineParts log_line_parts(double window_loss, int64_t window_steps);
  runtime::LogLineSource log_line_source_;  // the pipeline engine's, when set
  // The accumulation boundary's work after backward: model step, schedule, zeroed gradients, global_steps_ + 1.
  void boundary_step();
  // One optimizer step at the accumulation boundary; false when an overflow (fp16's, or inf/NaN gradients where
  // DeepSpeed skips them) skipped it.
  bool take_model_step();
  int64_t skipped_steps() const;  // by the loss scaler or the non-finite guard
  // engine_pipe.cc: `local` OR-ed over layout_.model_parallel (itself when there is none).
  bool agree_overflow(bool local);
  // engine_pipe.cc: the gradient norm over the whole replica: this part's reduced gradients (`grads`, as
  // take_model_step holds them) without norm_excluded_, summed over layout_.model_parallel.
  double replica_grad_norm(const std::vector<at::Tensor>& grads);
  // (group, index) of a parameter of groups_; throws when `p` is not one.
  std::pair<size_t, size_t> locate(const at::Tensor& p) const;

  runtime::TensorSlicing pipeline_slicing_;  // a 3D pipeline stage's (layout_.model_parallel spans the stages)
  std::vector<at::Tensor> norm_excluded_;  // InitializeOptions::norm_excluded_params
  std::string parameter_name(size_t group, size_t index) const;
  // This rank's fp32 masters and optimizer states per group ([group][state]), as checkpoints read and write them:
  // the live tensors, or fp32 copies (read out of swap files; 16-bit masters converted), which
  // commit_checkpoint_state writes back (runtime/optimizer_step.h); for live tensors it does nothing.
  using CheckpointState = runtime::MasterState;
  CheckpointState checkpoint_state();
  void commit_checkpoint_state(const CheckpointState& state);
  std::vector<zero::MasterFragment> master_fragments() const;
  std::vector<std::vector<std::string>> parameter_names() const;
  std::vector<std::vector<std::vector<int64_t>>> parameter_shapes() const;
  checkpoint::StateDict optim_state_dict(const std::string& run_id, const CheckpointState& train_state) const;
  // The module's parameters by name in the model's dtype: views when the stage keeps them whole; when it partitions
  // them, gathered copies on rank 0 (collective; empty on other ranks) when `gather`, else nullopt.
  std::optional<checkpoint::StateDict> module_parameters(bool gather) const;
  checkpoint::StateDict model_state_dict(const std::string& run_id,
                                         const std::optional<checkpoint::StateDict>& client_state,
                                         const std::optional<checkpoint::StateDict>& params) const;
  void check_boundary(const char* what) const;
  // Refuses `what` between a window's last backward that started the step's work and the step() closing it.
  void check_step_closed(const char* what) const;
  void check_no_expert_parallelism(const char* what) const;
  // engine_checkpoint.cc: layer_<L>_expert_<E>_mp_rank_XX_model_states.pt for the experts this rank writes.
  void save_expert_files(const std::string& dir, const std::string& tag) const;
  // checkpoint.save_layout python_deepspeed: <dir>/<tag> written in Python DeepSpeed's layout from the staging tag
  // holding this save's own files, which is then removed. Collective.
  void save_python_layout(const std::string& dir, const std::string& staging, const std::string& tag);
  // engine_checkpoint_load.cc: what this engine holds and asks of a checkpoint (checkpoint/load_plan.h), the sections
  // its components own read from the plan, and the plan applied (collective).
  struct LoadedSections;
  // The load asked for (where, which tag, which format), then what this engine holds (in the collective phase: its
  // errors fail every rank alike).
  checkpoint::LoadTarget load_request(const std::string& dir, const LoadCheckpointOptions& options) const;
  void describe_model(checkpoint::LoadTarget& target, const LoadCheckpointOptions& options) const;
  LoadedSections read_sections(const checkpoint::LoadPlan& plan) const;
  // Masters, optimizer states, buffers and the optimizer's step and hyperparameters; true when the latter came
  // from the checkpoint.
  bool apply_model_and_optimizer(const checkpoint::LoadPlan& plan);
  void resume_training_state(const checkpoint::LoadPlan& plan, const LoadedSections& sections, bool lrs_restored);
  void apply_schedule();
  runtime::BreakdownTable breakdown_table_;
  // engine_pipe.cc: the stage as the pipeline engine needs it (zero/deferred_reduction.h); throws otherwise.
  zero::DeferredReduction& deferred_reduction(const char* what) const;
  void finish_construction(InitializeOptions& options);
  // engine_build.cc: what the iteration schedule drives in this engine (runtime/iteration_schedule.h), and the
  // names it knows parameters by (a tensor of the groups that the module does not name: "group g parameter i").
  runtime::IterationActions iteration_actions();
  std::vector<std::vector<std::string>> parameter_names_or_positions() const;
  // engine_checkpoint.cc: both name lists from one pass over the module (experts by their global names); a group
  // tensor the module does not name is "group g parameter i" when `positions_for_unnamed`, else an internal error.
  std::vector<std::vector<std::string>> names_by_group(bool positions_for_unnamed) const;
  // Moves the model to the accelerator's device (device_), refusing what does not run there yet.
  void place_on_device();
  // This rank's tensor rank and size, and parameter name -> (split dimension, fused blocks) of every parameter the tp
  // layers split (size 1 and no layout without tensor parallelism): the layout is saved in the model file as
  // "tp_partitions", so a universal conversion merges the tensor ranks' slices and a load at another tensor-parallel
  // size slices them again. Either the engine's own (layout_.tensor_parallel) or a 3D pipeline stage's
  // (set_tensor_slicing).
  runtime::TensorSlicing tensor_slicing() const;

  // Unscaled micro-batch losses of the step in progress, summed where the loss is (fp64): read once per step, so an
  // accelerator's backward is not waited for at every micro-step. Undefined until the first backward of a step.
  at::Tensor step_loss_sum_;
  int64_t step_loss_count_ = 0;

  bool breakdown_ = false;
};

}  // namespace deepspeed
