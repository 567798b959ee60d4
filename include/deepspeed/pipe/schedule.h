// Pipeline schedules as instruction streams: DeepSpeed's PipeSchedule, TrainSchedule (1F1B),
// InferenceSchedule and DataParallelSchedule.
//
// A schedule is pure: given (micro_batches, stages, stage_id) it returns the whole stream one
// pipeline stage executes for one batch, as a list of steps, each a list of instructions run in
// order. The pipeline engine interprets the instructions (load, forward, backward, point-to-point
// sends and receives, reductions, optimizer step); the schedule owns only their order and which
// pipeline buffer each one uses. Buffers are reused cyclically (micro-batch m uses buffer
// m % num_pipe_buffers()), so a stage holds num_pipe_buffers() micro-batches' activations at most.
//
// Sends and receives are blocking and pair up across neighbouring stages: SendActivation on stage s
// with RecvActivation on stage s+1, SendGrad on stage s with RecvGrad on stage s-1. DeepSpeed's
// schedules order them (even and odd stages alternate) so that the streams of all stages, executed
// concurrently, never deadlock, and each step is atomic: a barrier between steps cannot deadlock
// either. tests/pipe/ checks both by simulation.
//
// Names, step layouts and buffer ids follow deepspeed/runtime/pipe/schedule.py.
//
// Thread-safety: schedules are immutable after construction.
#pragma once

#include <string>
#include <vector>

namespace deepspeed::pipe {

enum class InstructionKind {
  // No buffer.
  kOptimizerStep,    // optimizer step and zero the gradients; after ReduceGrads/ReduceTiedGrads
  kReduceGrads,      // all-reduce gradients among the data-parallel ranks of this stage
  kReduceTiedGrads,  // all-reduce gradients of tied modules among the stages sharing them
  // On buffer `buffer_id`.
  kLoadMicroBatch,  // next micro-batch's inputs (first stage) or labels (last stage)
  kForwardPass,     // outputs[buffer] = forward(inputs[buffer])
  kBackwardPass,    // backward from outputs[buffer] with its gradient (last stage: the loss)
  kSendActivation,  // send outputs[buffer] to stage + 1
  kRecvActivation,  // inputs[buffer] = receive from stage - 1
  kSendGrad,        // send the gradient of inputs[buffer] to stage - 1
  kRecvGrad,        // gradient of outputs[buffer] = receive from stage + 1
};

// DeepSpeed's class name of the instruction: "ForwardPass".
const char* instruction_name(InstructionKind kind);

// True for the instructions that carry a buffer id.
bool is_buffer_instruction(InstructionKind kind);

struct PipeInstruction {
  InstructionKind kind;
  int buffer_id = -1;  // -1 for OptimizerStep, ReduceGrads, ReduceTiedGrads

  bool operator==(const PipeInstruction& other) const {
    return kind == other.kind && buffer_id == other.buffer_id;
  }
  bool operator!=(const PipeInstruction& other) const { return !(*this == other); }
};

// The instructions one stage runs, in order, between two points where a barrier would be safe.
using PipeStep = std::vector<PipeInstruction>;

// "ForwardPass(buffer_id=1)" or "OptimizerStep()", as DeepSpeed prints instructions.
std::string to_string(const PipeInstruction& instruction);
// "[RecvActivation(buffer_id=0), ForwardPass(buffer_id=0)]".
std::string to_string(const PipeStep& step);

class PipeSchedule {
 public:
  // Throws deepspeed::Error unless micro_batches >= 1, stages >= 1 and 0 <= stage_id < stages.
  PipeSchedule(int micro_batches, int stages, int stage_id);
  virtual ~PipeSchedule() = default;

  // The full stream for this stage, one entry per step.
  virtual std::vector<PipeStep> steps() const = 0;

  // How many pipeline buffers the engine allocates for this stage; buffer ids are below it.
  virtual int num_pipe_buffers() const { return micro_batches_; }

  int micro_batches() const { return micro_batches_; }
  int stages() const { return stages_; }
  int stage_id() const { return stage_id_; }
  bool is_first_stage() const { return stage_id_ == 0; }
  bool is_last_stage() const { return stage_id_ == stages_ - 1; }

 protected:
  bool valid_micro_batch(int micro_batch_id) const {
    return micro_batch_id >= 0 && micro_batch_id < micro_batches_;
  }
  bool valid_stage(int stage_id) const { return stage_id >= 0 && stage_id < stages_; }
  // The buffer of a valid micro-batch: cyclic over num_pipe_buffers().
  int buffer_idx(int micro_batch_id) const;

 private:
  int micro_batches_;
  int stages_;
  int stage_id_;
};

// Training with 1F1B (one forward, one backward): 2 * (micro_batches + stages - 1) steps, even
// stages run forwards on even steps and backwards on odd ones, odd stages the other way round, and
// each stage keeps at most stages - stage_id micro-batches between forward and backward. The last
// step ends with ReduceTiedGrads, ReduceGrads, OptimizerStep.
class TrainSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::vector<PipeStep> steps() const override;

  // max(2, min(stages - stage_id + 1, micro_batches)). The one buffer beyond the in-flight bound is
  // needed because a forward step receives the next micro-batch's input before sending the
  // gradient of the input whose backward just ran.
  int num_pipe_buffers() const override;

 private:
  // The micro-batch this stage works on at `step_id` (possibly out of range: an idle step) and
  // whether the step is a forward one.
  void step_to_micro_batch(int step_id, int* micro_batch_id, bool* is_forward) const;
};

// Inference: micro_batches + stages - 1 steps of forward passes through two alternating buffers.
class InferenceSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::vector<PipeStep> steps() const override;
  int num_pipe_buffers() const override { return 2; }
};

// Plain data parallelism with gradient accumulation (one stage, one buffer): DeepSpeed's example.
class DataParallelSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::vector<PipeStep> steps() const override;
  int num_pipe_buffers() const override { return 1; }
};

}  // namespace deepspeed::pipe
