// A test-only executor for pipeline schedules: runs every stage's instruction stream concurrently
// against a model of the pipeline engine and reports the first thing a real run would trip on.
//
// Communication is a blocking rendezvous: SendActivation on stage s completes only together with a
// RecvActivation on stage s+1 (SendGrad on s with RecvGrad on s-1), and ReduceTiedGrads only when
// every stage has reached it (DeepSpeed's worst case, where tied modules span all stages). When no
// stage can move and some are unfinished, the run is a deadlock.
//
// Micro-batch ids are not in the instructions, so the simulator tracks them as data: each buffer of
// each stage remembers which micro-batch's input, labels, output and gradients it holds; loads take
// the next micro-batch, sends carry what the buffer holds. So a schedule that overwrites a buffer
// still in use, backpropagates with another micro-batch's gradient, or pairs a send with the wrong
// receive fails here with a message naming the stage, step and instruction.
//
// Thread-safety: simulate() is a pure function.
#pragma once

#include <string>
#include <vector>

#include "deepspeed/pipe/schedule.h"

namespace deepspeed::pipe::testing {

// One executed instruction and the micro-batch it moved or computed (-1 for the ones without a
// buffer).
struct TraceEvent {
  InstructionKind kind;
  int buffer_id;
  int micro_batch;
  int step;
};

struct SimulationResult {
  bool ok = false;
  std::string error;  // empty when ok
  // Per stage, every instruction in the order it completed.
  std::vector<std::vector<TraceEvent>> traces;
};

// Runs streams[s] (the steps of stage s, for all stages of one pipeline) to completion.
// With barrier_between_steps, no stage starts step t+1 before every stage has finished step t
// (DeepSpeed promises that steps are atomic in this sense).
SimulationResult simulate(const std::vector<std::vector<PipeStep>>& streams,
                          bool barrier_between_steps = false);

// The events of one kind in a trace, in order.
std::vector<TraceEvent> events_of(const std::vector<TraceEvent>& trace, InstructionKind kind);

// The micro-batch ids of those events.
std::vector<int> micro_batches_of(const std::vector<TraceEvent>& trace, InstructionKind kind);

}  // namespace deepspeed::pipe::testing
