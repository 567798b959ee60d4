#include "pipeline_simulator.h"

#include <map>
#include <sstream>

namespace deepspeed::pipe::testing {

namespace {

// What one pipeline buffer holds, as micro-batch ids (-1: nothing).
struct Buffer {
  int input = -1;
  int label = -1;
  int output = -1;       // set by ForwardPass from `input`
  int output_grad = -1;  // received by RecvGrad
  int input_grad = -1;   // produced by BackwardPass
};

struct Located {
  PipeInstruction instruction;
  int step;
};

struct Stage {
  std::vector<Located> program;
  size_t pc = 0;
  std::map<int, Buffer> buffers;
  int inputs_loaded = 0;
  int labels_loaded = 0;
  std::vector<TraceEvent> trace;

  bool done() const { return pc >= program.size(); }
  const Located& current() const { return program[pc]; }
};

class Simulator {
 public:
  Simulator(const std::vector<std::vector<PipeStep>>& streams, bool barrier)
      : barrier_(barrier), stages_(streams.size()) {
    for (size_t s = 0; s < streams.size(); ++s) {
      for (size_t t = 0; t < streams[s].size(); ++t) {
        for (const auto& instruction : streams[s][t]) {
          stages_[s].program.push_back({instruction, static_cast<int>(t)});
        }
      }
    }
  }

  SimulationResult run() {
    SimulationResult result;
    while (error_.empty() && !all_done()) {
      bool progress = false;
      for (size_t s = 0; s < stages_.size() && error_.empty(); ++s) progress |= run_local(s);
      for (size_t s = 0; s < stages_.size() && error_.empty(); ++s) progress |= try_send(s);
      if (error_.empty()) progress |= try_reduce_tied_grads();
      if (error_.empty() && !progress) {
        if (barrier_ && all_at_or_past_barrier()) {
          ++barrier_step_;
          continue;
        }
        error_ = "deadlock: " + describe_positions();
      }
    }
    result.ok = error_.empty();
    result.error = error_;
    for (auto& stage : stages_) result.traces.push_back(std::move(stage.trace));
    return result;
  }

 private:
  bool all_done() const {
    for (const auto& stage : stages_) {
      if (!stage.done()) return false;
    }
    return true;
  }

  // Under the barrier, a stage may only run instructions of steps up to barrier_step_.
  bool allowed(const Stage& stage) const {
    return !stage.done() && (!barrier_ || stage.current().step <= barrier_step_);
  }

  bool all_at_or_past_barrier() const {
    for (const auto& stage : stages_) {
      if (!stage.done() && stage.current().step <= barrier_step_) return false;
    }
    return true;
  }

  std::string where(size_t s) const {
    const Located& at = stages_[s].current();
    std::ostringstream os;
    os << "stage " << s << " step " << at.step << " " << to_string(at.instruction);
    return os.str();
  }

  std::string describe_positions() const {
    std::ostringstream os;
    for (size_t s = 0; s < stages_.size(); ++s) {
      if (s) os << "; ";
      if (stages_[s].done()) {
        os << "stage " << s << " finished";
      } else {
        os << where(s) << " waiting";
      }
    }
    return os.str();
  }

  void fail(size_t s, const std::string& why) { error_ = where(s) + ": " + why; }

  void retire(size_t s, int micro_batch) {
    Stage& stage = stages_[s];
    const Located& at = stage.current();
    stage.trace.push_back({at.instruction.kind, at.instruction.buffer_id, micro_batch, at.step});
    ++stage.pc;
  }

  static bool is_communication(InstructionKind kind) {
    return kind == InstructionKind::kSendActivation || kind == InstructionKind::kRecvActivation ||
           kind == InstructionKind::kSendGrad || kind == InstructionKind::kRecvGrad ||
           kind == InstructionKind::kReduceTiedGrads;
  }

  // Runs stage s's local instructions until it blocks on communication; true if any ran.
  bool run_local(size_t s) {
    Stage& stage = stages_[s];
    const bool first = s == 0;
    const bool last = s + 1 == stages_.size();
    bool progress = false;
    while (error_.empty() && allowed(stage) &&
           !is_communication(stage.current().instruction.kind)) {
      const PipeInstruction in = stage.current().instruction;
      Buffer& buf = stage.buffers[in.buffer_id];
      int micro_batch = -1;
      switch (in.kind) {
        case InstructionKind::kLoadMicroBatch:
          if (!first && !last) {
            fail(s, "only the first and last stages load");
            return progress;
          }
          if (first) buf.input = micro_batch = stage.inputs_loaded++;
          if (last) buf.label = micro_batch = stage.labels_loaded++;
          break;
        case InstructionKind::kForwardPass:
          if (buf.input < 0) {
            fail(s, "no input in the buffer");
            return progress;
          }
          if (last && buf.label != buf.input) {
            fail(s, "labels of micro-batch " + std::to_string(buf.label) +
                        " with inputs of micro-batch " + std::to_string(buf.input));
            return progress;
          }
          buf.output = micro_batch = buf.input;
          buf.output_grad = buf.input_grad = -1;
          break;
        case InstructionKind::kBackwardPass:
          if (buf.output < 0) {
            fail(s, "no forward output in the buffer");
            return progress;
          }
          if (!last && buf.output_grad != buf.output) {
            fail(s, "output of micro-batch " + std::to_string(buf.output) +
                        " but gradient of micro-batch " + std::to_string(buf.output_grad));
            return progress;
          }
          if (buf.input != buf.output) {
            fail(s, "input of micro-batch " + std::to_string(buf.output) +
                        " was overwritten by micro-batch " + std::to_string(buf.input));
            return progress;
          }
          buf.input_grad = micro_batch = buf.output;
          break;
        default:  // ReduceGrads, OptimizerStep: local to the stage here
          break;
      }
      retire(s, micro_batch);
      progress = true;
    }
    return progress;
  }

  // If stage s is at a send and its peer at the matching receive, completes both.
  bool try_send(size_t s) {
    Stage& sender = stages_[s];
    if (!allowed(sender)) return false;
    const PipeInstruction in = sender.current().instruction;
    const bool activation = in.kind == InstructionKind::kSendActivation;
    if (!activation && in.kind != InstructionKind::kSendGrad) return false;
    const long peer_id = activation ? static_cast<long>(s) + 1 : static_cast<long>(s) - 1;
    if (peer_id < 0 || peer_id >= static_cast<long>(stages_.size())) {
      fail(s, "no stage " + std::to_string(peer_id) + " to send to");
      return false;
    }
    Stage& receiver = stages_[peer_id];
    const InstructionKind expected =
        activation ? InstructionKind::kRecvActivation : InstructionKind::kRecvGrad;
    if (!allowed(receiver) || receiver.current().instruction.kind != expected) return false;

    Buffer& from = sender.buffers[in.buffer_id];
    int payload = -1;
    if (activation) {
      if (from.output < 0) {
        fail(s, "no output to send");
        return false;
      }
      payload = from.output;
    } else {
      if (from.input_grad < 0) {
        fail(s, "no input gradient to send");
        return false;
      }
      if (from.input != from.input_grad) {
        fail(s, "gradient of micro-batch " + std::to_string(from.input_grad) +
                    " but its input was overwritten by micro-batch " + std::to_string(from.input));
        return false;
      }
      payload = from.input_grad;
    }
    Buffer& to = receiver.buffers[receiver.current().instruction.buffer_id];
    if (activation) {
      to.input = payload;
    } else {
      to.output_grad = payload;
    }
    retire(s, payload);
    retire(peer_id, payload);
    return true;
  }

  bool try_reduce_tied_grads() {
    for (const auto& stage : stages_) {
      if (!allowed(stage) ||
          stage.current().instruction.kind != InstructionKind::kReduceTiedGrads) {
        return false;
      }
    }
    for (size_t s = 0; s < stages_.size(); ++s) retire(s, -1);
    return true;
  }

  bool barrier_;
  int barrier_step_ = 0;
  std::vector<Stage> stages_;
  std::string error_;
};

}  // namespace

SimulationResult simulate(const std::vector<std::vector<PipeStep>>& streams,
                          bool barrier_between_steps) {
  return Simulator(streams, barrier_between_steps).run();
}

std::vector<TraceEvent> events_of(const std::vector<TraceEvent>& trace, InstructionKind kind) {
  std::vector<TraceEvent> out;
  for (const auto& event : trace) {
    if (event.kind == kind) out.push_back(event);
  }
  return out;
}

std::vector<int> micro_batches_of(const std::vector<TraceEvent>& trace, InstructionKind kind) {
  std::vector<int> out;
  for (const auto& event : events_of(trace, kind)) out.push_back(event.micro_batch);
  return out;
}

}  // namespace deepspeed::pipe::testing
