// What the engines tell the side features of a training run (progress bar and log line, monitors, flops profiler,
// autotuning probe): the phases of each micro-batch, and after each optimizer step a StepReport. The engine
// (runtime/engine.cc) and the pipeline engine (src/pipe/) publish the same events to the same observers, so
// neither checks a feature inline and a new one is one more observer.
//
// Every rank calls every hook, in the same order: an observer that needs a collective (the log line's loss
// averaged over ranks) may run one there. Hooks run on the training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace deepspeed::runtime {

// One optimizer step as the engine saw it.
struct StepReport {
  int64_t global_steps = 0;    // optimizer steps taken, this one included
  int64_t global_samples = 0;  // samples consumed so far (DeepSpeed's global_samples)
  // The step's loss as the engine reports it: this rank's mean over the step's micro-batches (the engine), or the
  // batch loss the last stage sent every stage (the pipeline engine).
  double loss = 0.0;
  std::vector<double> lrs;           // per parameter group, after the schedule's step
  double grad_norm = -1.0;           // -1: not computed; infinity: fp16 overflow skipped the step
  std::optional<double> loss_scale;  // fp16 only
  int64_t skipped_steps = 0;         // fp16 overflow skips so far
  // The step's tokens that trained, summed over the data-parallel ranks (Engine::add_trained_tokens); -1: not
  // counted (tokens/s is then samples/s x tokens_per_sample).
  int64_t trained_tokens = -1;
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Around each forward; `global_steps` = optimizer steps taken so far.
  virtual void begin_forward(int64_t global_steps) {}
  virtual void end_forward() {}
  virtual void begin_backward() {}
  virtual void end_backward() {}
  // Around each step() call; `boundary`: it updated the model, and `global_steps` counts that update.
  virtual void begin_step() {}
  virtual void end_step(bool boundary, int64_t global_steps) {}
  // After each optimizer step (the engine's boundary, the pipeline engine's batch), before end_step.
  virtual void on_report(const StepReport& report) {}
  // A checkpoint load set the step count: windows and rates start again from here.
  virtual void on_resume(int64_t global_steps) {}
};

// The observers of one engine, called in the order they were added.
class StepObservers {
 public:
  void add(std::unique_ptr<StepObserver> observer);

  void begin_forward(int64_t global_steps);
  void end_forward();
  void begin_backward();
  void end_backward();
  void begin_step();
  void end_step(bool boundary, int64_t global_steps);
  void on_report(const StepReport& report);
  void on_resume(int64_t global_steps);

 private:
  std::vector<std::unique_ptr<StepObserver>> list_;
};

}  // namespace deepspeed::runtime
