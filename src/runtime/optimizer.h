// The engine's view of an optimizer: step the flat groups, read and set each group's learning rate (and beta1 /
// momentum, which OneCycle cycles). Two kinds: the fused CPU kernels of src/ops built from the config's
// `optimizer` section, and a client torch::optim::Optimizer passed to initialize().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/config.h"
#include "runtime/flat_params.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace deepspeed::runtime {

class EngineOptimizer {
 public:
  virtual ~EngineOptimizer() = default;
  // One update of every group from its gradients (already averaged and clipped).
  virtual void step(std::vector<FlatGroup>& groups) = 0;
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // beta1 for Adam-like optimizers, momentum for SGD; false when the optimizer has neither.
  virtual bool set_momentum(size_t group, double momentum) = 0;
  virtual std::string name() const = 0;
};

// Builds the config's optimizer over `groups` (group lr / weight_decay override the config's when set).
// Throws ConfigError for an optimizer type this build does not implement.
std::unique_ptr<EngineOptimizer> make_fused_optimizer(const config::OptimizerConfig& cfg,
                                                      std::vector<FlatGroup>& groups);

// Wraps a caller's torch optimizer. Its param groups are matched to ours by position.
std::unique_ptr<EngineOptimizer> wrap_client_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);

// The learning rate the config's optimizer starts from (optimizer.params.lr, or the type's default).
double configured_lr(const config::OptimizerConfig& cfg);

}  // namespace deepspeed::runtime
