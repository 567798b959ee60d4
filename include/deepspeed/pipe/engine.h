// PipelineEngine: trains a PipelineModule with pipeline parallelism across stages and data parallelism across
// the replicas of each stage (DeepSpeed's PipelineEngine).
//
//   auto module = pipe::PipelineModule(pipe::PipelineModuleOptions{layers, /*num_stages=*/2, ...});
//   auto engine = pipe::initialize(module, deepspeed::Config::from_file("ds_config.json"));
//   for (...) at::Tensor loss = engine.train_batch(next_micro_batch);
//
// One train_batch() runs gradient_accumulation_steps micro-batches through DeepSpeed's 1F1B schedule
// (pipe/schedule.h): activations go forward and their gradients backward between neighbouring stages with
// point-to-point messages (shapes and dtypes are sent once, on the first exchange; buffers are then reused), tied
// weights' gradients are all-reduced among the stages sharing them, every stage's gradients among its data-parallel
// replicas, and each stage steps its own optimizer, with the gradient norm (clipping) and the fp16 overflow decision
// agreed over the whole pipeline. Each stage's optimizer, LR schedule, precision and ZeRO stage 0 or 1 come from the
// config as for deepspeed::Engine; ZeRO stages 2 and 3 are rejected, as DeepSpeed rejects them with pipelines.
//
// The data iterator is called once per micro-batch on the first stage (for inputs) and on the last stage (for
// labels); other stages never call it. Every micro-batch of a run, in train_batch and eval_batch alike, must have
// the same shape: shapes are announced once per link. An error on one stage (a changed shape, a missing label, a
// non-scalar loss) throws there; its neighbours, blocked in a transfer, fail when the communication timeout
// (DS_COMM_TIMEOUT, 30 minutes by default) expires. A batch that threw leaves no gradients behind.
//
// Thread-safety: driven from one thread, in the same order on every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/pipe/module.h"

namespace deepspeed::pipe {

struct MicroBatch {
  at::Tensor inputs;  // read on the first stage
  at::Tensor labels;  // read on the last stage
};
using DataIterator = std::function<MicroBatch()>;

// Where this rank's time went in the last train_batch/eval_batch (seconds), from the engine's own clocks.
struct PipelineTiming {
  double total = 0;      // the whole batch
  double compute = 0;    // loading, forward, backward and optimizer step
  double p2p = 0;        // sending and receiving activations and gradients, waits for neighbours included
  double reduce = 0;     // tied and data-parallel gradient reductions
  // Share of the batch this stage spent not computing: the pipeline bubble plus communication.
  double idle_fraction() const { return total > 0 ? 1.0 - compute / total : 0.0; }
};

class PipelineEngineImpl;

class PipelineEngine {
 public:
  explicit PipelineEngine(std::shared_ptr<PipelineEngineImpl> impl);

  // One optimizer step over gradient_accumulation_steps micro-batches. Returns the batch's mean loss over its
  // micro-batches and data-parallel replicas, on every rank (a 0-dim fp32 tensor).
  at::Tensor train_batch(const DataIterator& data);
  // The same batch arithmetic without gradients or a step (eval mode for the duration).
  at::Tensor eval_batch(const DataIterator& data);

  int stage_id() const;
  int num_stages() const;
  bool is_first_stage() const { return stage_id() == 0; }
  bool is_last_stage() const { return stage_id() == num_stages() - 1; }
  int micro_batches() const;
  int dp_world_size() const;
  int64_t global_steps() const;
  std::vector<double> get_lr() const;
  double get_global_grad_norm() const;
  double loss_scale() const;
  int64_t skipped_steps() const;
  const PipelineTiming& last_timing() const;

  // DeepSpeed's pipeline checkpoint: every stage's engine state in mp_rank_<stage>_model_states.pt and
  // zero_pp_rank_<dp>_mp_rank_<stage>_optim_states.pt, each layer's weights in layer_<index>-model_states.pt (a tied
  // module at its first layer index), then <dir>/latest. Collective over the world, between batches; returns the tag.
  std::string save_checkpoint(const std::string& save_dir, const std::optional<std::string>& tag = std::nullopt,
                              const std::optional<checkpoint::StateDict>& client_state = std::nullopt);
  // Loads a checkpoint saved by a pipeline of the same stage count and layer partition (any data-parallel size and
  // ZeRO stage 0/1); throws checkpoint::CheckpointError naming the difference otherwise. nullopt when no tag is
  // given and <dir>/latest does not exist. Collective.
  std::optional<LoadCheckpointResult> load_checkpoint(const std::string& load_dir,
                                                      const LoadCheckpointOptions& options = {});
  PipelineModule module() const;
  // This stage's engine, for reading (batch sizes, counters, model-state accounting). Training and checkpoints go
  // through the pipeline engine: the stage engine alone knows nothing of the other stages.
  const Engine& stage_engine() const;

 private:
  std::shared_ptr<PipelineEngineImpl> impl_;
};

// Builds the stage's engine and the pipeline's communicator groups (data-parallel, pipeline and tied groups, created
// in the same order on every rank). Throws ConfigError for ZeRO stage 2/3 and deepspeed::Error for a topology with
// a "model" axis longer than 1 (tensor slicing is not implemented).
PipelineEngine initialize(PipelineModule module, const Config& config, InitializeOptions options = {});

}  // namespace deepspeed::pipe
