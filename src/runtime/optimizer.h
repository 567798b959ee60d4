// The engine's view of an optimizer: step each group's fp32 master weights (the whole flat buffer at stage 0, this
// rank's partition at stages 1 and 2) from their fp32 gradients, read and set each group's learning rate (and
// beta1 / momentum, which OneCycle cycles). Two kinds: the fused CPU kernels of src/ops built from the config's
// `optimizer` section (state sized like the masters, so it is partitioned with them), and a client
// torch::optim::Optimizer passed to initialize() (stage 0 fp32 only: it steps the model's own parameters).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/config.h"
#include "deepspeed/error.h"
#include "zero/flat_params.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace deepspeed::runtime {

class EngineOptimizer {
 public:
  virtual ~EngineOptimizer() = default;
  // One update of every group's master weights from its gradients (already averaged, unscaled and clipped).
  virtual void step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads) = 0;
  // Bytes of optimizer state this rank holds (for memory accounting).
  virtual int64_t state_bytes() const = 0;
  // The state tensors this rank holds (e.g. Adam's exp_avg and exp_avg_sq per group), for offload_states.
  virtual std::vector<at::Tensor> state_tensors() const { return {}; }
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // beta1 for Adam-like optimizers, momentum for SGD; false when the optimizer has neither.
  virtual bool set_momentum(size_t group, double momentum) = 0;
  virtual std::string name() const = 0;

  // Checkpoints. state_names(): the per-element state tensors of a group, in order (Adam: exp_avg, exp_avg_sq);
  // group_state(g) returns them (views of the live state, so a caller may copy into them). Empty for an optimizer
  // whose state the engine does not see (a client torch optimizer: see archive()).
  virtual std::vector<std::string> state_names() const { return {}; }
  virtual std::vector<at::Tensor> group_state(size_t group) const { return {}; }
  // Optimizer steps taken (Adam's bias correction reads it).
  virtual int64_t step_count() const { return 0; }
  virtual void set_step_count(int64_t steps) {}
  // beta1 / momentum of a group, when the optimizer has one.
  virtual std::optional<double> momentum(size_t group) const { return std::nullopt; }
  // A group's weight decay, when the optimizer knows it (saved beside lr for exporters: deepspeed_export.h).
  virtual std::optional<double> weight_decay(size_t group) const { return std::nullopt; }
  // A client torch optimizer's whole state as bytes of torch's own archive format (empty for the fused ones), and
  // the way back.
  virtual std::string archive() const { return {}; }
  virtual void restore_archive(const std::string& bytes) {}

  // Fused copy-back (DeepSpeed's fp16_param): from now on step() also writes each group's updated master, rounded
  // to nearest even, into targets[g] (a contiguous bf16/fp16 CPU tensor shaped like the master) in the same pass
  // over memory. Returns false, changing nothing, when this optimizer cannot (then the caller copies). step_slice
  // never writes them.
  virtual bool set_copy_back(const std::vector<at::Tensor>& targets) { return false; }

  // Slice-wise stepping for a caller that owns the state (NVMe offload streams it through buffers). Only the
  // fused optimizers support it. num_states(): state tensors per element (Adam 2, SGD with momentum 1, ...).
  virtual int num_states() const { return -1; }
  virtual void begin_step() {}
  // `copy`, when defined, is a bf16/fp16 CPU tensor shaped like `master` that also receives the updated master,
  // rounded to nearest even, in the same pass (the fused copy-back of set_copy_back, for one slice).
  virtual void step_slice(size_t group, const at::Tensor& master, const at::Tensor& grad, const at::Tensor& first,
                          const at::Tensor& second, const at::Tensor& copy = at::Tensor()) {
    DS_ASSERT(false, "step_slice is not supported by ", name());
  }
};

// An optimizer whose every group has a learning rate, a beta1 (or momentum, which OneCycle cycles) and a weight
// decay of its own, and counts its steps: the engine-facing half LAMB and Muon share.
class PerGroupOptimizer : public EngineOptimizer {
 public:
  double lr(size_t group) const override { return lrs_.at(group); }
  void set_lr(size_t group, double lr) override { lrs_.at(group) = lr; }
  bool set_momentum(size_t group, double momentum) override {
    betas1_.at(group) = momentum;
    return true;
  }
  std::optional<double> momentum(size_t group) const override { return betas1_.at(group); }
  std::optional<double> weight_decay(size_t group) const override { return decays_.at(group); }
  int64_t step_count() const override { return step_; }
  void set_step_count(int64_t steps) override { step_ = steps; }

 protected:
  std::vector<double> lrs_, decays_, betas1_;
  int64_t step_ = 0;
};

// Builds the config's optimizer for `masters` (fp32, or bf16 with bf16_master_weights_and_grads), one per group;
// `groups` supply lr / weight_decay overrides. `resident_state` false: no state is allocated (the caller streams it
// through step_slice). `state_dtype`: the states' (bf16 with bf16_optimizer_states; stepped then through
// step_slice on fp32 copies, as bf16 masters are).
// Throws ConfigError for an optimizer type this build does not implement.
std::unique_ptr<EngineOptimizer> make_fused_optimizer(const config::OptimizerConfig& cfg,
                                                      const std::vector<zero::FlatGroup>& groups,
                                                      const std::vector<at::Tensor>& masters,
                                                      bool resident_state = true,
                                                      at::ScalarType state_dtype = at::kFloat);

// Wraps a caller's torch optimizer. Its param groups are matched to ours by position.
std::unique_ptr<EngineOptimizer> wrap_client_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);

// The learning rate the config's optimizer starts from (optimizer.params.lr, or the type's default).
double configured_lr(const config::OptimizerConfig& cfg);

}  // namespace deepspeed::runtime
