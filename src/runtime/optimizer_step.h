// How the boundary's update reaches the masters: the OptimizerStep seam. The engine decides whether a step is taken
// (loss scaling) and by how much the gradients are scaled (1 / loss scale, clipping); which way the update then runs
// is this object's business, chosen once when the engine is built (make_nvme_step for offload_optimizer "nvme",
// make_resident_step otherwise):
//   - in place on the stage's resident masters: fp32 gradients scaled, then the optimizer's fused kernel;
//     gradients or masters in the model's bf16/fp16 in fp32 chunks of Fp32Operands::kChunk instead (ResidentStep);
//   - streamed through the NVMe swap files a sub-group at a time (offload_optimizer "nvme": NvmeStep);
//   - on a thread of its own while the next forward and backward run (offload_optimizer.overlap_step, ZenFlow's
//     overlap_step): the resident update launched, landed by land() (OverlappedStep wrapping it);
//   - started during the backward that ends the window and validated at the step (offload_optimizer.super_offload:
//     SpeculativeUpdate wrapping the resident step, made by make_speculative_step): the step's "started work" hooks.
// Each also gives checkpoints this rank's masters and optimizer states as fp32 and takes them back.
//
// Thread-safety: the training thread calls every method; an overlapped update runs on its own thread between run()
// and land(), which every reader or writer of the masters must call first.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/zero.h"
#include "runtime/optimizer.h"
#include "zero/flat_params.h"
#include "zero/stage.h"

namespace deepspeed::runtime {

// This rank's masters and optimizer states per group ([group][state]) as checkpoints read and write them: the live
// tensors, or fp32 copies (NVMe: read out of the swap files; bf16 masters: converted) that commit_checkpoint_state
// writes back.
struct MasterState {
  std::vector<at::Tensor> masters;
  std::vector<std::vector<at::Tensor>> states;
};

class OptimizerStep {
 public:
  virtual ~OptimizerStep() = default;

  // Steps the optimizer on the stage's masters with `grads` (this rank's, as Stage::step_grads returns them) times
  // `coef`, then publishes the masters into the parameters; an overlapped step returns with the update running
  // (pending()) and publishes at land(). Collective (publish gathers partitions).
  virtual void run(std::vector<at::Tensor> grads, double coef) = 0;
  // An update still running: waits for it (rethrowing its error) and publishes. Returns whether there was one.
  virtual bool land() { return false; }
  virtual bool pending() const { return false; }

  virtual MasterState checkpoint_state() = 0;
  // Writes `state` (from checkpoint_state, filled by a load) back where the live values are; NVMe: the parameters
  // too. For live tensors there is nothing to do.
  virtual void commit_checkpoint_state(const MasterState& state) = 0;
  // Bytes the optimizer's states occupy in memory (NVMe: the swap buffer pool the masters and states stream through).
  virtual int64_t resident_state_bytes() const = 0;

  // ---- Work a step starts during the backward that ends the accumulation window (a speculative step). The engine
  // calls these around every window's last backward and step; the others do nothing. ----
  // That backward begins; its gradients will be multiplied by `unscale` (1 / the loss scale that produces them).
  virtual void begin_window_backward(double /*unscale*/) {}
  // That backward threw: nothing it started may be accepted.
  virtual void abandon_started() noexcept {}
  // The step begins: what the backward started finishes before anything reads what it wrote.
  virtual void finish_started() {}
  // The step is skipped (fp16 overflow): what was started is undone.
  virtual void skip_started() {}
  // Whether what was started stands for a step at `coef` (`unscale` being what it used, `grad_norm` the step's
  // norm); when true the step is done and published, when false (nothing started, or it was undone) run() takes it.
  virtual bool accept_started(double /*coef*/, double /*unscale*/, double /*grad_norm*/) { return false; }
  // Throws naming `what` while the window's backward has started work that its step() has not closed.
  virtual void check_nothing_started(const char* /*what*/) const {}
  // Adds this step's counters to the stage's (speculative slices and rollbacks).
  virtual void add_stats(zero::Stage3Stats& /*stats*/) const {}
};

// What the steps work on. `optimizer` may be null (no optimizer: checkpoints still read the masters).
struct OptimizerStepParts {
  const Config* config = nullptr;
  zero::Stage* stage = nullptr;
  EngineOptimizer* optimizer = nullptr;
  const std::vector<zero::FlatGroup>* groups = nullptr;
  int rank = 0;             // names this rank's NVMe swap folder
  bool on_accelerator = false;  // the overlapped step leaves the training thread a core
};

// Multiplies fp32 gradients by `coef` in place and returns false; returns true, leaving them, when the gradients or
// the masters are 16-bit (the chunked fp32 step converts and scales them as it goes: scaling them in their own dtype
// would round every one). Shared by the steps.
bool scale_gradients(const zero::Stage& stage, std::vector<at::Tensor>& grads, double coef);

// offload_optimizer "nvme" with the config's optimizer: builds the optimizer over the stage's initial masters
// (resident state off: its states live in the swap files) into `*optimizer`, and the step that streams them.
std::unique_ptr<OptimizerStep> make_nvme_step(const OptimizerStepParts& parts, const config::OptimizerConfig& cfg,
                                              std::unique_ptr<EngineOptimizer>* optimizer);
// The resident step, wrapped to run overlapped when `overlapped`.
std::unique_ptr<OptimizerStep> make_resident_step(const OptimizerStepParts& parts, bool overlapped);
// offload_optimizer.super_offload: `inner` (the resident step) with the speculative CPU step of each partition started
// as the stage reports its final gradient (runtime/speculative_step.h). `may_roll_back`: something can still change
// the step after its gradients are known (clipping, fp16 loss scaling); `worker_threads` for the speculation's worker.
std::unique_ptr<OptimizerStep> make_speculative_step(const OptimizerStepParts& parts,
                                                     std::unique_ptr<OptimizerStep> inner, bool may_roll_back,
                                                     int worker_threads);

// What building the step needs beyond the parts.
struct StepRequest {
  std::shared_ptr<torch::optim::Optimizer> client;  // InitializeOptions::optimizer
  comm::ProcessGroup world;                         // the data-parallel group partitioned optimizers reduce over
  // Why some tensors are not whole over `world` (MoE experts, tensor-parallel layers), or null: Lamb and Muon refuse.
  const char* whole_tensor_clash = nullptr;
  bool custom_layout = false;  // inside a pipeline or a caller's data-parallel layout
};
struct BuiltStep {
  std::unique_ptr<EngineOptimizer> optimizer;  // null without one (the step still serves checkpoints)
  std::unique_ptr<OptimizerStep> step;
};
// The optimizer the config (or the client) names and the way its step runs, chosen once from the config
// (optimizer_step_factory.cc). Throws ConfigError naming the key for combinations not supported.
BuiltStep make_optimizer_step(OptimizerStepParts parts, StepRequest request);

}  // namespace deepspeed::runtime
