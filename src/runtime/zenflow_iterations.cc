// ZenFlow as the engine's IterationSchedule (iteration_schedule.h): update windows of update_interval iterations (or
// adaptive ones), each iteration also taking the selective step of the selected columns (zenflow.h), and the
// selection's state in checkpoints.
#include <memory>
#include <utility>

#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"
#include "runtime/iteration_schedule.h"
#include "runtime/zenflow.h"
#include "zero/stage_features.h"

namespace deepspeed::runtime {
namespace {

class ZenFlowIterations final : public IterationSchedule {
 public:
  ZenFlowIterations(std::unique_ptr<ZenFlow> zenflow, IterationParts parts,
                    std::vector<std::vector<std::string>> names)
      : zenflow_(std::move(zenflow)),
        parts_(std::move(parts)),
        names_(std::move(names)),
        batched_(zero::feature<zero::PartitionWrites>(*parts_.stage)) {}

  bool ends_window(int64_t i) const override { return zenflow_->ends_window(i); }
  // An adaptive window's length is known only at its end: its step divides the sum then.
  int64_t loss_divisor() const override {
    return zenflow_->schedule().adaptive ? 1 : zenflow_->schedule().update_interval;
  }
  int64_t gradient_divisor(int64_t i) const override { return zenflow_->step_gradient_divisor(i); }
  void begin_backward(int64_t i) override { zenflow_->begin_backward(i); }
  bool counts_iterations() const override { return true; }  // a step spans the window's iterations
  void after_publish() override { zenflow_->write_selected_into_parameters(); }

  void run(int64_t i, bool ends_window) override {
    // A step's publish and ZenFlow's writes over it each refresh stage 3's persistent unit: once is enough.
    if (batched_) batched_->begin_batched_writes();
    try {
      if (zenflow_->schedule().selective(i)) {
        selective_iteration(i, ends_window);
      } else if (ends_window) {
        parts_.actions.optimizer_step();
        parts_.actions.land();  // the warm-up steps every parameter synchronously, overlapped or not
      }
    } catch (...) {
      if (batched_) batched_->end_batched_writes(/*refresh=*/false);
      throw;
    }
    if (batched_) batched_->end_batched_writes(/*refresh=*/true);
    zenflow_->end_iteration(i);
  }

  void check_save_point(int64_t next, const char* what) const override {
    // The gradients of an unfinished update window are not saved.
    DS_CHECK(zenflow_->starts_window(next), what, ": with zero_optimization.zenflow, call it after a step that ends "
             "an update window (",
             !zenflow_->schedule().adaptive
                 ? "every update_interval = " + std::to_string(zenflow_->schedule().update_interval) +
                       " iterations after the warm-up"
                 : std::string("Engine::is_gradient_accumulation_boundary() before the step says which do"),
             "); iteration ", next - 1, " did not");
  }
  // The masters take the selected values, so the fp32 weights in the files are the model's whichever way they are
  // read (a resume without ZenFlow, ds_to_fp32, a universal conversion). The running step ignores what the masters
  // hold for the selected columns, so this changes nothing for this run.
  void before_save() override { write_selected_into_masters(); }
  const char* section_key() const override { return kZenFlowSection; }
  c10::IValue section() const override { return zenflow_->state_dict(); }
  void check_section(const c10::impl::GenericDict& saved, const std::string& where) const override {
    zenflow_->load_state_dict(saved, where, names_, /*apply=*/false);
  }
  // ZenFlow counts iterations, not steps; a checkpoint without its state starts it afresh (warm-up first).
  int64_t resume(int64_t /*steps*/, std::optional<int64_t> saved_iterations,
                 const std::optional<c10::impl::GenericDict>& section, const std::string& where) override {
    if (!section) {
      zenflow_->reset();  // the selected values it held are not the loaded model's
      return 0;
    }
    DS_CHECK_T(checkpoint::CheckpointError, saved_iterations.has_value(), "checkpoint file ", where,
               " has no 'micro_steps'");
    zenflow_->load_state_dict(*section, where, names_);
    zenflow_->resume_at(*saved_iterations);  // saved at a window's start
    return *saved_iterations;
  }
  void resume_module_only(int64_t i) override {
    zenflow_->reset();       // the selected values held are not the loaded module's
    zenflow_->resume_at(i);  // and a window starts here (the iteration count goes on)
  }
  void after_restore() override { zenflow_->write_selected_into_parameters(); }

 private:
  void write_selected_into_masters() {
    zenflow_->write_selected_into_masters(parts_.stage->masters(), parts_.stage->master_fragments());
  }
  void selective_iteration(int64_t i, bool ends_window) {
    zenflow_->reduce_gradients();
    if (zenflow_->schedule().selects(i) || !zenflow_->has_selection()) {
      if (zenflow_->has_selection()) {
        // The CPU optimizer goes on from where the selective one leaves the columns about to leave the selection:
        // its masters take those values once no step is reading them.
        parts_.actions.land();
        write_selected_into_masters();
      }
      zenflow_->select();
    }
    const std::vector<double> lrs = parts_.actions.lrs();  // this iteration's, before the scheduler moves
    if (ends_window)
      parts_.actions.optimizer_step();
    else
      parts_.actions.advance_schedule();  // DeepSpeed's ZenFlow steps the schedule at every iteration
    zenflow_->step(lrs);
  }

  std::unique_ptr<ZenFlow> zenflow_;
  IterationParts parts_;
  std::vector<std::vector<std::string>> names_;
  zero::PartitionWrites* batched_;  // the stage's (stage 3), null for a flat stage
};

ZenFlowAdam adam_of(const config::OptimizerConfig& optimizer, const EngineOptimizer& built, size_t groups) {
  const auto& p = optimizer.params;
  const std::vector<double> betas = p.get_number_list("betas", {0.9, 0.999});
  ZenFlowAdam adam;
  adam.beta1 = betas.at(0);
  adam.beta2 = betas.at(1);
  adam.eps = p.get_number("eps", 1e-8);
  adam.adamw = optimizer.type == "adamw" ? true : p.get_bool("adam_w_mode", true);
  for (size_t g = 0; g < groups; ++g) adam.weight_decay.push_back(built.weight_decay(g).value_or(0.0));
  return adam;
}

}  // namespace

std::unique_ptr<IterationSchedule> make_zenflow_iterations(IterationParts parts, const IterationRequest& request) {
  const Config& config = *parts.config;
  // (What the config alone rules out, the feature gate refused: config/feature_gate.cc; the client optimizer, the
  // experts and the layout, config::initialize_rules.)
  DS_ASSERT(!request.client_optimizer && parts.optimizer != nullptr && !request.experts && !request.custom_layout,
            "initialize refuses ZenFlow without the config's optimizer, with experts or in a custom layout");
  std::vector<std::vector<at::Tensor>> params;
  for (const auto& g : *parts.groups) params.push_back(g.params);
  ZenFlowPartitioned partitioned;  // stage 3: the selected values go into the stage's partitions
  if (zero::partitions_parameters(*parts.stage)) {
    partitioned.stage = parts.stage;
    partitioned.writes = zero::feature<zero::PartitionWrites>(*parts.stage);
    DS_ASSERT(partitioned.writes != nullptr, "a stage that partitions parameters writes into its partitions");
    partitioned.shapes = parts.stage->param_shapes();
  }
  std::vector<std::vector<std::string>> names = parts.names();
  auto zenflow = std::make_unique<ZenFlow>(*config.zero.zenflow, std::move(params), names,
                                           adam_of(*config.optimizer, *parts.optimizer, parts.groups->size()),
                                           parts.world, std::move(partitioned));
  return std::make_unique<ZenFlowIterations>(std::move(zenflow), std::move(parts), std::move(names));
}

}  // namespace deepspeed::runtime
