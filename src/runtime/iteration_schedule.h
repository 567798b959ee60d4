// How iterations (one per engine.step()) group into optimizer steps, and what runs around them: the IterationSchedule
// seam. Gradient accumulation is the default (a window of gradient_accumulation_steps micro-batches ends in one
// optimizer step); ZenFlow (zero_optimization.zenflow, zenflow.h) replaces it with update windows whose iterations
// also take a selective step of the most important columns (zenflow_iterations.cc). The engine asks the schedule at
// fixed points: whether an iteration ends a window, what the loss and the window's gradients are divided by, what an
// iteration's step() runs, and what a checkpoint saves and restores of the schedule's own state.
//
// Thread-safety: the training thread calls every method.
#pragma once

#include <ATen/core/Dict.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/config.h"
#include "runtime/optimizer.h"
#include "zero/flat_params.h"
#include "zero/stage.h"

namespace deepspeed::runtime {

// What a schedule drives in the engine.
struct IterationActions {
  std::function<void()> optimizer_step;    // the window's optimizer step, schedule, zeroed gradients, global step
  std::function<void()> land;              // lands an overlapped step (publishing its masters)
  std::function<void()> advance_schedule;  // the LR schedule one step on, written into the optimizer
  std::function<std::vector<double>()> lrs;  // the optimizer's learning rates now
};

class IterationSchedule {
 public:
  virtual ~IterationSchedule() = default;

  // Iteration `i` (0-based) ends a window: its step() takes the optimizer step. Holds from its backward on.
  virtual bool ends_window(int64_t i) const = 0;
  // What each micro-batch's loss is divided by: the window's length when it is known in advance, else 1.
  virtual int64_t loss_divisor() const = 0;
  // What the step divides the window's summed gradients by besides the loss scale (a window whose length was not
  // known in advance: its length).
  virtual int64_t gradient_divisor(int64_t /*i*/) const { return 1; }
  // Before iteration `i`'s backward.
  virtual void begin_backward(int64_t /*i*/) {}
  // Iteration `i`'s step(): the optimizer step when `ends_window`, and whatever else the schedule runs.
  virtual void run(int64_t i, bool ends_window) = 0;
  // An overlapped step landed: its publish wrote the masters' values over the parameters.
  virtual void after_publish() {}
  // Samples consumed since a load: true counts train_batch_size per iteration, false per optimizer step.
  virtual bool counts_iterations() const { return false; }

  // ---- Checkpoints ----
  // Throws naming `what` when iteration `next` may not be preceded by a save (inside a window).
  virtual void check_save_point(int64_t /*next*/, const char* /*what*/) const {}
  // Before the files are written: the masters take what the schedule holds apart from them.
  virtual void before_save() {}
  // The model file's key of the schedule's state, and the state (none: nullptr).
  virtual const char* section_key() const { return nullptr; }
  virtual c10::IValue section() const { return c10::IValue(); }
  // Checks a saved section against this model (applies nothing); throws CheckpointError naming `where`.
  virtual void check_section(const c10::impl::GenericDict& /*saved*/, const std::string& /*where*/) const {}
  // A full load: the iteration training goes on from, given the optimizer steps loaded, the saved iteration count
  // (nullopt: none saved), and the schedule's section (nullopt: the file has none, which restarts the schedule).
  virtual int64_t resume(int64_t steps, std::optional<int64_t> saved_iterations,
                         const std::optional<c10::impl::GenericDict>& section, const std::string& where) = 0;
  // A module-only load at iteration `i`: what the schedule held of the old model is dropped.
  virtual void resume_module_only(int64_t /*i*/) {}
  // After any load, once the parameters hold the restored masters.
  virtual void after_restore() {}
};

// What building a schedule needs.
struct IterationParts {
  const Config* config = nullptr;
  zero::Stage* stage = nullptr;
  const std::vector<zero::FlatGroup>* groups = nullptr;
  const EngineOptimizer* optimizer = nullptr;
  // The parameters' names by (group, index), asked for only by a schedule that needs them.
  std::function<std::vector<std::vector<std::string>>()> names;
  comm::ProcessGroup world;
  IterationActions actions;
};

// What building a schedule refuses for lack of support, beyond the config (ConfigError naming the key).
struct IterationRequest {
  bool client_optimizer = false;
  bool experts = false;        // MoE expert parallelism
  bool custom_layout = false;  // inside a pipeline or a caller's data-parallel layout
};

// zero_optimization.zenflow: ZenFlow's update windows; otherwise gradient accumulation.
std::unique_ptr<IterationSchedule> make_iteration_schedule(IterationParts parts, const IterationRequest& request);

}  // namespace deepspeed::runtime
