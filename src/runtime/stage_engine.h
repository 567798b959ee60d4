// What the pipeline engine (src/pipe/) uses of the engine that trains one pipeline stage: it runs the micro-batch
// schedule itself and calls in for one micro-batch's forward and backward, the deferred data-parallel reduction,
// the boundary step and the step's report to the observers (step_observer.h). EngineImpl implements it; the
// pipeline sees nothing else of it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/deepspeed.h"
#include "runtime/console_observer.h"

namespace deepspeed::runtime {

// A rank's place in its tensor-parallel group and how the layers split each parameter over it.
struct TensorSlicing {
  int rank = 0, size = 1;
  std::map<std::string, std::pair<int64_t, int64_t>> layout;  // parameter name -> (split dimension, fused blocks)
};

class StageEngine {
 public:
  virtual ~StageEngine() = default;

  virtual const Config& config() const = 0;
  virtual int64_t global_steps() const = 0;

  // Around one micro-batch's forward (observers, timers, stage hooks).
  virtual void begin_forward() = 0;
  virtual void end_forward() = 0;
  // One micro-batch's backward: from a scalar loss (`grad` undefined: scaled as Engine::backward scales it) or from
  // a stage's `output` with the gradient received from the next stage (already scaled). Gradients accumulate;
  // nothing is reduced until reduce_gradients().
  virtual void backward_micro_batch(const at::Tensor& output, const at::Tensor& grad) = 0;
  // Where parameter `p`'s accumulated fp32 gradient lives (a view of the flat gradient buffer), e.g. to all-reduce
  // a tied weight's gradient among the stages sharing it before reduce_gradients().
  virtual at::Tensor accumulated_grad(const at::Tensor& p) const = 0;
  // The data-parallel reduction of the accumulated gradients.
  virtual void reduce_gradients() = 0;
  // The boundary step after `micro_batches` micro-batches: optimizer, LR schedule, zeroed gradients, counters.
  virtual void pipeline_step(int64_t micro_batches) = 0;
  // Drops the gradients accumulated since the last step (a batch that failed half-way).
  virtual void discard_gradients() = 0;

  // A 3D pipeline's stage: how its layers are split over the tensor ranks (the stage engine's model-parallel group
  // spans every stage of the replica, so it cannot tell). Checkpoints record it; a universal load slices by it.
  virtual void set_tensor_slicing(TensorSlicing slicing) = 0;

  // After a training batch: its loss (the one every stage received) to the observers, as a StepReport.
  virtual void report_step(double loss) = 0;
  // The pipeline's own parts of the log line (its breakdown table, the first stage's idle share).
  virtual void set_log_line_source(LogLineSource source) = 0;

  virtual std::string save_checkpoint(const std::string& dir, const std::optional<std::string>& tag,
                                      const std::optional<checkpoint::StateDict>& client_state, bool save_latest) = 0;
  virtual std::optional<LoadCheckpointResult> load_checkpoint(const std::string& dir,
                                                              const LoadCheckpointOptions& options) = 0;
};

// The engine of one pipeline stage over `module` (the stage's layers, as `any` for the Engine handle), and the
// handle over the same state that PipelineEngine::stage_engine() returns.
struct StageEngineParts {
  std::shared_ptr<StageEngine> stage;
  Engine engine;
};
StageEngineParts make_stage_engine(std::shared_ptr<torch::nn::Module> module, torch::nn::AnyModule any,
                                   const Config& config, InitializeOptions options);

}  // namespace deepspeed::runtime
