// PipelineEngine's state (include/deepspeed/pipe/engine.h): the stage's engine (runtime::StageEngine), the
// communicator groups built from the topology, the point-to-point links and the per-buffer activations.
// pipeline_engine.cc runs the schedules, pipeline_checkpoint.cc saves and loads.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/pipe/engine.h"
#include "deepspeed/pipe/schedule.h"
#include "deepspeed/pipe/topology.h"
#include "pipe/p2p.h"
#include "runtime/stage_engine.h"

namespace deepspeed::pipe {

using Clock = std::chrono::steady_clock;

class PipelineEngineImpl {
 public:
  PipelineEngineImpl(PipelineModule module, const Config& config, InitializeOptions options);

  at::Tensor run(const DataIterator& data, bool train);
  // pipeline_checkpoint.cc
  std::string save_checkpoint(const std::string& dir, const std::optional<std::string>& tag,
                              const std::optional<checkpoint::StateDict>& client_state);
  std::optional<LoadCheckpointResult> load_checkpoint(const std::string& dir, const LoadCheckpointOptions& options);

  PipelineModule module_;
  PipeGridRanks grid_;
  comm::ProcessGroup world_;
  comm::ProcessGroup data_group_;
  comm::ProcessGroup pipe_group_;
  // This stage's tied keys shared with other stages, and their groups (the same data-parallel coordinate).
  std::vector<std::pair<std::string, comm::ProcessGroup>> tie_groups_;
  std::shared_ptr<runtime::StageEngine> impl_;
  std::optional<Engine> engine_;  // the handle over impl_'s state (PipelineEngine::stage_engine)
  std::unique_ptr<P2PLink> act_to_next_, act_from_prev_, grad_to_prev_, grad_from_next_;
  int micro_batches_ = 1;
  PipelineTiming timing_;
  PipelineTiming window_;  // wall_clock_breakdown: the training batches' timings since the last log line

 private:
  struct Buffer {
    at::Tensor input, label, output;
    at::Tensor act_recv, grad_recv;  // reused receive buffers
  };
  // The config and the caller's options against the module's topology and its tp layers
  // (config::initialize_rules, phase kPipeline); sets the layers' tp_overlap_comm.
  void check_topology(const Config& config, const InitializeOptions& options);
  void make_groups(InitializeOptions& options);
  void sync_tied_weights();
  void execute(const PipeInstruction& ins, const DataIterator& data, bool train);
  at::Tensor finish_loss();
  // The pipeline's parts of the console's log line: the batch loss, its breakdown table, the first stage's idle.
  runtime::LogLineParts log_line_parts(const runtime::StepReport& last, const runtime::LogWindow::Span& window);

  std::vector<Buffer> buffers_;
  std::vector<at::Tensor> losses_;  // this batch's micro-batch losses (last stage)
};


}  // namespace deepspeed::pipe
