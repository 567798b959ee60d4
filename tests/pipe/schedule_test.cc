#include "deepspeed/pipe/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "deepspeed/error.h"
#include "pipeline_simulator.h"

namespace deepspeed::pipe {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

using testing::events_of;
using testing::micro_batches_of;
using testing::simulate;
using testing::SimulationResult;
using testing::TraceEvent;
using Kind = InstructionKind;

struct Shape {
  int stages;
  int micro_batches;
};

const std::vector<Shape> kShapes = {{1, 1}, {1, 4}, {2, 1}, {2, 4}, {4, 4}, {4, 8}, {3, 5}, {5, 2}};

std::string name(const Shape& shape) {
  return "stages=" + std::to_string(shape.stages) +
         " micro_batches=" + std::to_string(shape.micro_batches);
}

template <typename Schedule>
std::vector<std::vector<PipeStep>> all_streams(const Shape& shape) {
  std::vector<std::vector<PipeStep>> streams;
  for (int s = 0; s < shape.stages; ++s) {
    streams.push_back(Schedule(shape.micro_batches, shape.stages, s).steps());
  }
  return streams;
}

std::vector<int> iota(int n) {
  std::vector<int> out(n);
  for (int i = 0; i < n; ++i) out[i] = i;
  return out;
}

std::string dump(const std::vector<PipeStep>& stream) {
  std::string out;
  for (size_t t = 0; t < stream.size(); ++t) {
    out += "  step " + std::to_string(t) + ": " + to_string(stream[t]) + "\n";
  }
  return out;
}

TEST(PipeInstructionTest, PrintsLikeDeepSpeed) {
  EXPECT_EQ(to_string(PipeInstruction{Kind::kForwardPass, 1}), "ForwardPass(buffer_id=1)");
  EXPECT_EQ(to_string(PipeInstruction{Kind::kOptimizerStep}), "OptimizerStep()");
  EXPECT_EQ(to_string(PipeStep{{Kind::kRecvActivation, 0}, {Kind::kSendGrad, 2}}),
            "[RecvActivation(buffer_id=0), SendGrad(buffer_id=2)]");
}

// DeepSpeed's own stream for 2 stages and 2 micro-batches, stage by stage.
TEST(TrainScheduleTest, MatchesDeepSpeedForTwoStagesTwoMicroBatches) {
  const PipeInstruction r_opt{Kind::kOptimizerStep}, r_grads{Kind::kReduceGrads},
      r_tied{Kind::kReduceTiedGrads};
  auto in = [](Kind kind, int buffer) { return PipeInstruction{kind, buffer}; };
  std::vector<PipeStep> stage0 = {
      {in(Kind::kLoadMicroBatch, 0), in(Kind::kForwardPass, 0)},
      {in(Kind::kSendActivation, 0)},
      {in(Kind::kLoadMicroBatch, 1), in(Kind::kForwardPass, 1)},
      {in(Kind::kSendActivation, 1), in(Kind::kRecvGrad, 0), in(Kind::kBackwardPass, 0)},
      {},
      {in(Kind::kRecvGrad, 1), in(Kind::kBackwardPass, 1), r_tied, r_grads, r_opt},
  };
  std::vector<PipeStep> stage1 = {
      {},
      {in(Kind::kRecvActivation, 0), in(Kind::kLoadMicroBatch, 0), in(Kind::kForwardPass, 0)},
      {in(Kind::kBackwardPass, 0)},
      {in(Kind::kRecvActivation, 1), in(Kind::kSendGrad, 0), in(Kind::kLoadMicroBatch, 1),
       in(Kind::kForwardPass, 1)},
      {in(Kind::kBackwardPass, 1)},
      {in(Kind::kSendGrad, 1), r_tied, r_grads, r_opt},
  };
  EXPECT_EQ(TrainSchedule(2, 2, 0).steps(), stage0) << dump(TrainSchedule(2, 2, 0).steps());
  EXPECT_EQ(TrainSchedule(2, 2, 1).steps(), stage1) << dump(TrainSchedule(2, 2, 1).steps());
}

TEST(TrainScheduleTest, NumPipeBuffersIsDeepSpeeds) {
  for (const Shape& shape : kShapes) {
    for (int s = 0; s < shape.stages; ++s) {
      const int expected = std::max(2, std::min(shape.stages - s + 1, shape.micro_batches));
      EXPECT_EQ(TrainSchedule(shape.micro_batches, shape.stages, s).num_pipe_buffers(), expected)
          << name(shape) << " stage " << s;
    }
  }
  EXPECT_EQ(InferenceSchedule(8, 4, 1).num_pipe_buffers(), 2);
}

TEST(TrainScheduleTest, StreamShapeAndBufferIds) {
  for (const Shape& shape : kShapes) {
    for (int s = 0; s < shape.stages; ++s) {
      TrainSchedule schedule(shape.micro_batches, shape.stages, s);
      const auto stream = schedule.steps();
      ASSERT_EQ(static_cast<int>(stream.size()), 2 * (shape.micro_batches + shape.stages - 1));
      for (const PipeStep& step : stream) {
        for (const PipeInstruction& in : step) {
          if (is_buffer_instruction(in.kind)) {
            EXPECT_GE(in.buffer_id, 0) << name(shape) << " stage " << s << dump(stream);
            EXPECT_LT(in.buffer_id, schedule.num_pipe_buffers()) << name(shape) << dump(stream);
          } else {
            EXPECT_EQ(in.buffer_id, -1) << to_string(in);
          }
          // Only the ends of the pipeline load data; only neighbours that exist are addressed.
          if (in.kind == Kind::kLoadMicroBatch) {
            EXPECT_TRUE(schedule.is_first_stage() || schedule.is_last_stage());
          }
          if (in.kind == Kind::kRecvActivation || in.kind == Kind::kSendGrad) {
            EXPECT_GT(s, 0);
          }
          if (in.kind == Kind::kSendActivation || in.kind == Kind::kRecvGrad) {
            EXPECT_LT(s, shape.stages - 1);
          }
        }
      }
    }
  }
}

TEST(TrainScheduleTest, EveryStageRunsEachMicroBatchForwardThenBackwardOnce) {
  for (const Shape& shape : kShapes) {
    SimulationResult run = simulate(all_streams<TrainSchedule>(shape));
    ASSERT_TRUE(run.ok) << name(shape) << ": " << run.error;
    for (int s = 0; s < shape.stages; ++s) {
      const auto& trace = run.traces[s];
      // In order, each exactly once.
      EXPECT_EQ(micro_batches_of(trace, Kind::kForwardPass), iota(shape.micro_batches))
          << name(shape) << " stage " << s;
      EXPECT_EQ(micro_batches_of(trace, Kind::kBackwardPass), iota(shape.micro_batches))
          << name(shape) << " stage " << s;
      // Backward after forward, and at most stages - stage_id micro-batches in between (1F1B).
      int in_flight = 0, max_in_flight = 0, forwards = 0;
      for (const TraceEvent& e : trace) {
        if (e.kind == Kind::kForwardPass) {
          ++forwards;
          max_in_flight = std::max(max_in_flight, ++in_flight);
        } else if (e.kind == Kind::kBackwardPass) {
          EXPECT_LT(e.micro_batch, forwards) << name(shape) << " stage " << s;
          --in_flight;
        }
      }
      EXPECT_EQ(max_in_flight, std::min(shape.stages - s, shape.micro_batches))
          << name(shape) << " stage " << s;
      EXPECT_LE(max_in_flight,
                TrainSchedule(shape.micro_batches, shape.stages, s).num_pipe_buffers());
    }
  }
}

TEST(TrainScheduleTest, ReductionsAndOptimizerStepOnceAtTheEnd) {
  for (const Shape& shape : kShapes) {
    for (int s = 0; s < shape.stages; ++s) {
      const auto stream = TrainSchedule(shape.micro_batches, shape.stages, s).steps();
      std::vector<PipeInstruction> flat;
      for (const auto& step : stream) flat.insert(flat.end(), step.begin(), step.end());
      ASSERT_GE(flat.size(), 3u);
      const std::vector<PipeInstruction> tail(flat.end() - 3, flat.end());
      EXPECT_EQ(tail, (std::vector<PipeInstruction>{
                          {Kind::kReduceTiedGrads}, {Kind::kReduceGrads}, {Kind::kOptimizerStep}}))
          << name(shape) << " stage " << s << "\n"
          << dump(stream);
      // ...and nowhere else; they all sit in the last step.
      for (Kind kind : {Kind::kReduceTiedGrads, Kind::kReduceGrads, Kind::kOptimizerStep}) {
        EXPECT_EQ(std::count(flat.begin(), flat.end(), PipeInstruction{kind}), 1);
      }
      const PipeStep& last = stream.back();
      EXPECT_EQ(std::count(last.begin(), last.end(), PipeInstruction{Kind::kOptimizerStep}), 1);
    }
  }
}

// All stages together with blocking sends and receives: no deadlock (also with a barrier after
// every step), every activation reaches the next stage and every gradient the previous one, in
// micro-batch order, matched send to receive.
TEST(TrainScheduleTest, SimulatedPipelineIsDeadlockFreeAndDeliversInOrder) {
  for (const Shape& shape : kShapes) {
    for (bool barrier : {false, true}) {
      SimulationResult run = simulate(all_streams<TrainSchedule>(shape), barrier);
      ASSERT_TRUE(run.ok) << name(shape) << " barrier=" << barrier << ": " << run.error;
      for (int s = 0; s < shape.stages; ++s) {
        const auto& trace = run.traces[s];
        const bool first = s == 0, last = s == shape.stages - 1;
        const std::vector<int> all = iota(shape.micro_batches), none;
        EXPECT_EQ(micro_batches_of(trace, Kind::kSendActivation), last ? none : all) << s;
        EXPECT_EQ(micro_batches_of(trace, Kind::kRecvGrad), last ? none : all) << s;
        EXPECT_EQ(micro_batches_of(trace, Kind::kRecvActivation), first ? none : all) << s;
        EXPECT_EQ(micro_batches_of(trace, Kind::kSendGrad), first ? none : all) << s;
        EXPECT_EQ(micro_batches_of(trace, Kind::kLoadMicroBatch).size(),
                  (first || last) ? all.size() : 0u);
      }
    }
  }
}

TEST(InferenceScheduleTest, SimulatedPipelineForwardsEveryMicroBatchInOrder) {
  for (const Shape& shape : kShapes) {
    const auto streams = all_streams<InferenceSchedule>(shape);
    for (int s = 0; s < shape.stages; ++s) {
      ASSERT_EQ(static_cast<int>(streams[s].size()), shape.micro_batches + shape.stages - 1);
      for (const auto& step : streams[s]) {
        for (const auto& in : step) {
          EXPECT_NE(in.kind, Kind::kBackwardPass);
          EXPECT_NE(in.kind, Kind::kOptimizerStep);
          if (is_buffer_instruction(in.kind)) {
            EXPECT_TRUE(in.buffer_id == 0 || in.buffer_id == 1) << to_string(in);
          }
        }
      }
    }
    for (bool barrier : {false, true}) {
      SimulationResult run = simulate(streams, barrier);
      ASSERT_TRUE(run.ok) << name(shape) << " barrier=" << barrier << ": " << run.error;
      for (int s = 0; s < shape.stages; ++s) {
        const std::vector<int> all = iota(shape.micro_batches), none;
        EXPECT_EQ(micro_batches_of(run.traces[s], Kind::kForwardPass), all) << name(shape);
        EXPECT_EQ(micro_batches_of(run.traces[s], Kind::kRecvActivation), s == 0 ? none : all);
        EXPECT_EQ(micro_batches_of(run.traces[s], Kind::kSendActivation),
                  s == shape.stages - 1 ? none : all);
      }
    }
  }
}

TEST(DataParallelScheduleTest, AccumulatesThenSteps) {
  SimulationResult run = simulate({DataParallelSchedule(3, 1, 0).steps()});
  ASSERT_TRUE(run.ok) << run.error;
  EXPECT_EQ(micro_batches_of(run.traces[0], Kind::kBackwardPass), iota(3));
  EXPECT_EQ(events_of(run.traces[0], Kind::kOptimizerStep).size(), 1u);
  EXPECT_EQ(events_of(run.traces[0], Kind::kOptimizerStep)[0].step, 2);
}

TEST(PipeScheduleTest, BadArgumentsNameTheValue) {
  EXPECT_THAT([] { TrainSchedule(0, 2, 0); },
              ThrowsMessage<Error>(HasSubstr("micro_batches must be >= 1, got 0")));
  EXPECT_THAT([] { TrainSchedule(4, 0, 0); },
              ThrowsMessage<Error>(HasSubstr("stages must be >= 1, got 0")));
  EXPECT_THAT([] { TrainSchedule(4, 2, 2); },
              ThrowsMessage<Error>(HasSubstr("stage_id 2 out of range [0, 2)")));
  EXPECT_THAT([] { InferenceSchedule(4, 2, -1); },
              ThrowsMessage<Error>(HasSubstr("stage_id -1 out of range")));
}

}  // namespace
}  // namespace deepspeed::pipe
