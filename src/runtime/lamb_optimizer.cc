#include "runtime/lamb_optimizer.h"

#include <ATen/ATen.h>

#include <string>
#include <utility>

#include "deepspeed/error.h"
#include "deepspeed/ops.h"

namespace deepspeed::runtime {
namespace {

class LambOptimizer final : public PerGroupOptimizer {
 public:
  LambOptimizer(const config::OptimizerConfig& cfg, const std::vector<zero::FlatGroup>& groups,
                const std::vector<at::Tensor>& masters, std::vector<zero::MasterFragment> fragments, bool partitioned,
                comm::ProcessGroup group)
      : fragments_(std::move(fragments)), partitioned_(partitioned), group_(std::move(group)) {
    const config::Params& p = cfg.params;
    const std::vector<double> betas = p.get_number_list("betas", {0.9, 0.999});
    DS_CHECK_T(ConfigError, betas.size() == 2, "optimizer.params.betas: expected 2 numbers, got ", betas.size());
    hp_.beta1 = betas[0];
    hp_.beta2 = betas[1];
    hp_.eps = p.get_number("eps", 1e-8);
    hp_.weight_decay = p.get_number("weight_decay", 0.0);
    hp_.bias_correction = p.get_bool("bias_correction", true);
    hp_.eps_inside_sqrt = p.get_bool("eps_inside_sqrt", false);
    hp_.max_coeff = p.get_number("max_coeff", 10.0);
    hp_.min_coeff = p.get_number("min_coeff", 0.01);
    DS_CHECK_T(ConfigError, hp_.min_coeff > 0 && hp_.min_coeff <= hp_.max_coeff,
               "optimizer.params: Lamb needs 0 < min_coeff <= max_coeff, got ", hp_.min_coeff, " and ", hp_.max_coeff);
    DS_CHECK_T(ConfigError, !p.get_bool("amsgrad", false), "optimizer.params.amsgrad: FusedLamb has no AMSGrad");
    DS_CHECK_T(ConfigError, p.get_number("max_grad_norm", 0.0) == 0.0, "optimizer.params.max_grad_norm: clip with "
               "the top-level gradient_clipping instead (the engine clips before the optimizer)");
    const double lr = configured_lr(cfg);
    for (size_t g = 0; g < groups.size(); ++g) {
      lrs_.push_back(groups[g].lr.value_or(lr));
      decays_.push_back(groups[g].weight_decay.value_or(hp_.weight_decay));
      betas1_.push_back(hp_.beta1);
      first_.push_back(at::zeros_like(masters[g]));
      second_.push_back(at::zeros_like(masters[g]));
      base_.push_back(params_);
      params_ += static_cast<int64_t>(groups[g].params.size());
    }
  }

  void step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads) override {
    ++step_;
    // Phase 1: moments, and each tensor's sums of squares over the fragments this rank holds.
    at::Tensor sums = at::zeros({params_, 2}, at::kDouble);
    auto* s = sums.data_ptr<double>();
    for (const zero::MasterFragment& f : fragments_) {
      const int64_t id = base_[f.group] + static_cast<int64_t>(f.index);
      const ops::LambNorms n =
          ops::lamb_moments(piece(masters, f), piece(grads, f), piece(first_, f), piece(second_, f), hp(f.group), step_);
      s[2 * id] += n.param_sq;
      s[2 * id + 1] += n.update_sq;
    }
    if (partitioned_ && group_.size() > 1) group_.all_reduce(sums, comm::ReduceOp::kSum);
    // Phase 2: every piece of a tensor moves by its whole tensor's trust ratio.
    for (const zero::MasterFragment& f : fragments_) {
      const int64_t id = base_[f.group] + static_cast<int64_t>(f.index);
      const double coeff = ops::lamb_coefficient({s[2 * id], s[2 * id + 1]}, hp(f.group));
      ops::lamb_apply(piece(masters, f), piece(first_, f), piece(second_, f), hp(f.group), step_, coeff);
    }
  }

  int64_t state_bytes() const override {
    int64_t bytes = 0;
    for (size_t g = 0; g < first_.size(); ++g) bytes += first_[g].nbytes() + second_[g].nbytes();
    return bytes;
  }
  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> out = first_;
    out.insert(out.end(), second_.begin(), second_.end());
    return out;
  }
  std::string name() const override { return "lamb"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<at::Tensor> group_state(size_t group) const override { return {first_.at(group), second_.at(group)}; }

 private:
  ops::LambParams hp(size_t group) const {
    ops::LambParams p = hp_;
    p.lr = lrs_[group];
    p.weight_decay = decays_[group];
    p.beta1 = betas1_[group];
    return p;
  }
  static at::Tensor piece(const std::vector<at::Tensor>& flat, const zero::MasterFragment& f) {
    return flat.at(f.group).narrow(0, f.offset, f.end - f.begin);
  }

  ops::LambParams hp_;
  std::vector<zero::MasterFragment> fragments_;
  bool partitioned_;
  comm::ProcessGroup group_;
  std::vector<at::Tensor> first_, second_;
  std::vector<int64_t> base_;  // group -> id of its first parameter in the sums
  int64_t params_ = 0;
};

}  // namespace

std::unique_ptr<EngineOptimizer> make_lamb_optimizer(const config::OptimizerConfig& cfg,
                                                     const std::vector<zero::FlatGroup>& groups,
                                                     const std::vector<at::Tensor>& masters,
                                                     std::vector<zero::MasterFragment> fragments, bool partitioned,
                                                     comm::ProcessGroup group) {
  return std::make_unique<LambOptimizer>(cfg, groups, masters, std::move(fragments), partitioned, std::move(group));
}

}  // namespace deepspeed::runtime
