// The simulator must be able to fail, or the schedule tests prove nothing: each case here is a
// broken stream it has to reject with a message naming what went wrong.
#include "pipeline_simulator.h"

#include <gtest/gtest.h>

namespace deepspeed::pipe::testing {
namespace {

using Kind = InstructionKind;

PipeInstruction in(Kind kind, int buffer = 0) { return {kind, buffer}; }

void expect_failure(const SimulationResult& run, const std::string& needle) {
  EXPECT_FALSE(run.ok);
  EXPECT_NE(run.error.find(needle), std::string::npos) << run.error;
}

TEST(PipelineSimulatorTest, DetectsDeadlockOfTwoBlockedReceives) {
  // Each stage waits to receive from the other before it sends: the classic cycle.
  std::vector<PipeStep> stage0 = {{in(Kind::kLoadMicroBatch), in(Kind::kForwardPass),
                                   in(Kind::kRecvGrad), in(Kind::kSendActivation),
                                   in(Kind::kBackwardPass)}};
  std::vector<PipeStep> stage1 = {{in(Kind::kRecvActivation), in(Kind::kLoadMicroBatch),
                                   in(Kind::kForwardPass), in(Kind::kBackwardPass),
                                   in(Kind::kSendGrad)}};
  expect_failure(simulate({stage0, stage1}),
                 "deadlock: stage 0 step 0 RecvGrad(buffer_id=0) waiting; "
                 "stage 1 step 0 RecvActivation(buffer_id=0) waiting");
}

TEST(PipelineSimulatorTest, DetectsDeadlockOnlyUnderStepBarrier) {
  // Stage 1 receives in step 1 what stage 0 sends in step 0; fine without a barrier, but with one
  // stage 0's send in step 0 waits for a receive that may not start before the barrier.
  std::vector<PipeStep> stage0 = {
      {in(Kind::kLoadMicroBatch), in(Kind::kForwardPass), in(Kind::kSendActivation)}};
  std::vector<PipeStep> stage1 = {
      {}, {in(Kind::kRecvActivation), in(Kind::kLoadMicroBatch), in(Kind::kForwardPass)}};
  EXPECT_TRUE(simulate({stage0, stage1}, false).ok);
  expect_failure(simulate({stage0, stage1}, true), "deadlock");
}

TEST(PipelineSimulatorTest, DetectsOutOfOrderDelivery) {
  // Stage 0 sends micro-batch 1 first; the last stage pairs it with labels of micro-batch 0.
  std::vector<PipeStep> stage0 = {{in(Kind::kLoadMicroBatch, 0), in(Kind::kLoadMicroBatch, 1),
                                   in(Kind::kForwardPass, 0), in(Kind::kForwardPass, 1),
                                   in(Kind::kSendActivation, 1), in(Kind::kSendActivation, 0)}};
  std::vector<PipeStep> stage1 = {
      {in(Kind::kRecvActivation, 0), in(Kind::kLoadMicroBatch, 0), in(Kind::kForwardPass, 0)}};
  expect_failure(simulate({stage0, stage1}),
                 "labels of micro-batch 0 with inputs of micro-batch 1");
}

TEST(PipelineSimulatorTest, DetectsBackwardWithAnotherMicroBatchsGradient) {
  std::vector<PipeStep> stage0 = {{in(Kind::kLoadMicroBatch, 0), in(Kind::kForwardPass, 0),
                                   in(Kind::kSendActivation, 0), in(Kind::kRecvGrad, 1),
                                   in(Kind::kBackwardPass, 0)}};
  std::vector<PipeStep> stage1 = {{in(Kind::kRecvActivation, 0), in(Kind::kLoadMicroBatch, 0),
                                   in(Kind::kForwardPass, 0), in(Kind::kBackwardPass, 0),
                                   in(Kind::kSendGrad, 0)}};
  expect_failure(simulate({stage0, stage1}),
                 "output of micro-batch 0 but gradient of micro-batch -1");
}

TEST(PipelineSimulatorTest, DetectsCommunicationPastTheEnds) {
  std::vector<PipeStep> only = {
      {in(Kind::kLoadMicroBatch), in(Kind::kForwardPass), in(Kind::kSendActivation)}};
  expect_failure(simulate({only}), "no stage 1 to send to");
}

// DeepSpeed's TrainSchedule with one buffer fewer than num_pipe_buffers(): exactly the in-flight
// bound. A forward step then receives the next input into the buffer whose gradient it has yet to
// send, and the simulator must catch the overwrite.
class TooFewBuffersTrainSchedule : public TrainSchedule {
 public:
  using TrainSchedule::TrainSchedule;
  int num_pipe_buffers() const override { return TrainSchedule::num_pipe_buffers() - 1; }
};

TEST(PipelineSimulatorTest, DetectsBufferOverwriteWithoutDeepSpeedsSpareBuffer) {
  const int stages = 4, micro_batches = 8;
  std::vector<std::vector<PipeStep>> streams;
  for (int s = 0; s < stages; ++s) {
    streams.push_back(TooFewBuffersTrainSchedule(micro_batches, stages, s).steps());
  }
  expect_failure(simulate(streams), "overwritten by micro-batch");
}

}  // namespace
}  // namespace deepspeed::pipe::testing
