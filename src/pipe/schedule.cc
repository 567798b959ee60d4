#include "deepspeed/pipe/schedule.h"

#include <algorithm>

#include "deepspeed/error.h"

namespace deepspeed::pipe {

namespace {

bool is_even(int x) { return x % 2 == 0; }

PipeInstruction make(InstructionKind kind, int buffer_id = -1) { return {kind, buffer_id}; }

}  // namespace

const char* instruction_name(InstructionKind kind) {
  switch (kind) {
    case InstructionKind::kOptimizerStep:
      return "OptimizerStep";
    case InstructionKind::kReduceGrads:
      return "ReduceGrads";
    case InstructionKind::kReduceTiedGrads:
      return "ReduceTiedGrads";
    case InstructionKind::kLoadMicroBatch:
      return "LoadMicroBatch";
    case InstructionKind::kForwardPass:
      return "ForwardPass";
    case InstructionKind::kBackwardPass:
      return "BackwardPass";
    case InstructionKind::kSendActivation:
      return "SendActivation";
    case InstructionKind::kRecvActivation:
      return "RecvActivation";
    case InstructionKind::kSendGrad:
      return "SendGrad";
    case InstructionKind::kRecvGrad:
      return "RecvGrad";
  }
  return "UnknownInstruction";
}

bool is_buffer_instruction(InstructionKind kind) {
  return kind != InstructionKind::kOptimizerStep && kind != InstructionKind::kReduceGrads &&
         kind != InstructionKind::kReduceTiedGrads;
}

std::string to_string(const PipeInstruction& instruction) {
  std::string out = instruction_name(instruction.kind);
  if (is_buffer_instruction(instruction.kind)) {
    return out + "(buffer_id=" + std::to_string(instruction.buffer_id) + ")";
  }
  return out + "()";
}

std::string to_string(const PipeStep& step) {
  std::string out = "[";
  for (size_t i = 0; i < step.size(); ++i) {
    if (i) out += ", ";
    out += to_string(step[i]);
  }
  return out + "]";
}

PipeSchedule::PipeSchedule(int micro_batches, int stages, int stage_id)
    : micro_batches_(micro_batches), stages_(stages), stage_id_(stage_id) {
  DS_CHECK(micro_batches >= 1, "PipeSchedule: micro_batches must be >= 1, got ", micro_batches);
  DS_CHECK(stages >= 1, "PipeSchedule: stages must be >= 1, got ", stages);
  DS_CHECK(stage_id >= 0 && stage_id < stages, "PipeSchedule: stage_id ", stage_id,
           " out of range [0, ", stages, ")");
}

int PipeSchedule::buffer_idx(int micro_batch_id) const {
  DS_ASSERT(valid_micro_batch(micro_batch_id), "micro_batch_id=", micro_batch_id);
  return micro_batch_id % num_pipe_buffers();
}

int TrainSchedule::num_pipe_buffers() const {
  return std::max(2, std::min(stages() - stage_id() + 1, micro_batches()));
}

void TrainSchedule::step_to_micro_batch(int step_id, int* micro_batch_id, bool* is_forward) const {
  // A stage alternates forward and backward steps, and neighbouring stages are in opposite phases,
  // so that on every step each communicating pair is one forward stage (talking backwards) and one
  // backward stage (talking forwards). Stage s starts its forwards floor(s/2) double-steps late and
  // runs its first backward once micro-batch 0 has come back from the last stage.
  *is_forward = is_even(step_id) == is_even(stage_id());
  int base = step_id / 2;
  if (*is_forward) {
    *micro_batch_id = base - stage_id() / 2;
  } else {
    *micro_batch_id = base - stages() + 1 + stage_id() / 2;
  }
}

std::vector<PipeStep> TrainSchedule::steps() const {
  const int total_steps = 2 * (micro_batches() + stages() - 1);
  const int prev_stage = stage_id() - 1;
  const int next_stage = stage_id() + 1;
  std::vector<PipeStep> out;
  out.reserve(total_steps);
  int prev_micro_batch = -1;  // the micro-batch of the previous step, valid or not
  for (int step_id = 0; step_id < total_steps; ++step_id) {
    int micro_batch = 0;
    bool is_forward = false;
    step_to_micro_batch(step_id, &micro_batch, &is_forward);
    const bool curr_valid = valid_micro_batch(micro_batch);
    const bool prev_valid = valid_micro_batch(prev_micro_batch);
    const int curr_buffer = curr_valid ? buffer_idx(micro_batch) : -1;
    const int prev_buffer = prev_valid ? buffer_idx(prev_micro_batch) : -1;

    PipeStep step;
    // The previous step's result travels now: a backward step sends the activation of the forward
    // before it, a forward step sends the input gradient of the backward before it. Receives come
    // first on forward steps and second on backward steps, which is what pairs them with the
    // neighbour's opposite phase.
    if (is_forward) {
      if (curr_valid && valid_stage(prev_stage)) {
        step.push_back(make(InstructionKind::kRecvActivation, curr_buffer));
      }
      if (prev_valid && valid_stage(prev_stage)) {
        step.push_back(make(InstructionKind::kSendGrad, prev_buffer));
      }
    } else {
      if (prev_valid && valid_stage(next_stage)) {
        step.push_back(make(InstructionKind::kSendActivation, prev_buffer));
      }
      if (curr_valid && valid_stage(next_stage)) {
        step.push_back(make(InstructionKind::kRecvGrad, curr_buffer));
      }
    }
    if ((is_first_stage() || is_last_stage()) && is_forward && curr_valid) {
      step.push_back(make(InstructionKind::kLoadMicroBatch, curr_buffer));
    }
    if (curr_valid) {
      step.push_back(
          make(is_forward ? InstructionKind::kForwardPass : InstructionKind::kBackwardPass,
               curr_buffer));
    }
    if (step_id == total_steps - 1) {
      step.push_back(make(InstructionKind::kReduceTiedGrads));
      step.push_back(make(InstructionKind::kReduceGrads));
      step.push_back(make(InstructionKind::kOptimizerStep));
    }
    prev_micro_batch = micro_batch;
    out.push_back(std::move(step));
  }
  return out;
}

std::vector<PipeStep> InferenceSchedule::steps() const {
  const int total_steps = micro_batches() + stages() - 1;
  const bool has_prev = valid_stage(stage_id() - 1);
  const bool has_next = valid_stage(stage_id() + 1);
  std::vector<PipeStep> out;
  out.reserve(total_steps);
  for (int step_id = 0; step_id < total_steps; ++step_id) {
    const int micro_batch = step_id - stage_id();
    // Two buffers alternate: this step receives into one while the other still holds the previous
    // micro-batch's output to send. Odd stages swap the roles so that a sender and its receiver
    // name the same parity.
    const int recv_buffer = is_even(stage_id()) ? step_id % 2 : (step_id + 1) % 2;
    const int send_buffer = 1 - recv_buffer;
    const bool receive = valid_micro_batch(micro_batch) && has_prev;
    const bool send = valid_micro_batch(micro_batch - 1) && has_next;

    PipeStep step;
    if ((is_first_stage() || is_last_stage()) && valid_micro_batch(micro_batch)) {
      step.push_back(make(InstructionKind::kLoadMicroBatch, recv_buffer));
    }
    // Blocking point-to-point: even stages send before they receive, odd stages receive first, so
    // every send meets a receive that is waiting for it.
    if (is_even(stage_id())) {
      if (send) step.push_back(make(InstructionKind::kSendActivation, send_buffer));
      if (receive) step.push_back(make(InstructionKind::kRecvActivation, recv_buffer));
    } else {
      if (receive) step.push_back(make(InstructionKind::kRecvActivation, recv_buffer));
      if (send) step.push_back(make(InstructionKind::kSendActivation, send_buffer));
    }
    if (valid_micro_batch(micro_batch)) {
      step.push_back(make(InstructionKind::kForwardPass, recv_buffer));
    }
    out.push_back(std::move(step));
  }
  return out;
}

std::vector<PipeStep> DataParallelSchedule::steps() const {
  std::vector<PipeStep> out;
  for (int step_id = 0; step_id < micro_batches(); ++step_id) {
    PipeStep step = {make(InstructionKind::kLoadMicroBatch, 0),
                     make(InstructionKind::kForwardPass, 0),
                     make(InstructionKind::kBackwardPass, 0)};
    if (step_id == micro_batches() - 1) {
      step.push_back(make(InstructionKind::kReduceGrads));
      step.push_back(make(InstructionKind::kOptimizerStep));
    }
    out.push_back(std::move(step));
  }
  return out;
}

}  // namespace deepspeed::pipe
