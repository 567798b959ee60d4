#include "runtime/muon_optimizer.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include <string>
#include <utility>

#include "deepspeed/error.h"
#include "deepspeed/ops.h"

namespace deepspeed::runtime {
namespace {

// Elements of Muon updates put together per all-reduce: bounds the transient buffer (16 MiB of fp32) while keeping
// the collectives few; a matrix larger than this travels alone.
constexpr int64_t kAssembleElements = int64_t{1} << 22;

class MuonOptimizer final : public PerGroupOptimizer {
 public:
  MuonOptimizer(const config::OptimizerConfig& cfg, const std::vector<zero::FlatGroup>& groups,
                const std::vector<at::Tensor>& masters, std::vector<std::vector<std::vector<int64_t>>> shapes,
                std::vector<zero::MasterFragment> fragments, bool partitioned, comm::ProcessGroup group)
      : shapes_(std::move(shapes)), partitioned_(partitioned), group_(std::move(group)) {
    const config::Params& p = cfg.params;
    DS_CHECK_T(ConfigError, !p.get_bool("per_head_muon", false), "optimizer.params.per_head_muon: not supported "
               "yet (it needs each attention projection's head count); Muon orthogonalizes whole matrices here");
    DS_CHECK_T(ConfigError, !p.has("max_grad_norm"), "optimizer.params.max_grad_norm: clip with the top-level "
               "gradient_clipping instead (the engine clips before the optimizer)");
    const std::vector<double> betas = p.get_number_list("betas", {0.9, 0.95});
    DS_CHECK_T(ConfigError, betas.size() == 2, "optimizer.params.betas: expected 2 numbers, got ", betas.size());
    beta2_ = betas[1];
    eps_ = p.get_number("eps", 1e-10);
    adam_w_mode_ = p.get_bool("adam_w_mode", true);
    ns_steps_ = p.get_int("ns_steps", 5);
    ns_method_ = ops::newton_schulz_from_name(p.get_string("ns_method", "gram"));
    // MuonWithAuxAdam's defaults when the config gives no lr; muon_lr / adam_lr override the shared one.
    const double muon_lr = p.get_number("muon_lr", p.get_number("lr", 0.02));
    const double adam_lr = p.get_number("adam_lr", p.get_number("lr", 3e-4));
    const double momentum = p.get_number("momentum", 0.95);
    const double weight_decay = p.get_number("weight_decay", 0.0);
    DS_ASSERT(groups.size() == masters.size() && groups.size() == shapes_.size(),
              "one master and one shape list per group");
    for (size_t g = 0; g < groups.size(); ++g) {
      const bool muon = groups[g].use_muon;
      use_muon_.push_back(muon);
      lrs_.push_back(groups[g].lr.value_or(muon ? muon_lr : adam_lr));
      decays_.push_back(groups[g].weight_decay.value_or(weight_decay));
      betas1_.push_back(muon ? momentum : betas[0]);
      first_.push_back(at::zeros_like(masters[g]));
      second_.push_back(muon ? at::Tensor() : at::zeros_like(masters[g]));
      pieces_.emplace_back(shapes_[g].size());
    }
    for (zero::MasterFragment& f : fragments)
      if (use_muon_.at(f.group)) pieces_[f.group].at(f.index).push_back(f);
  }

  void step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads) override {
    at::NoGradGuard no_grad;
    ++step_;
    for (size_t g = 0; g < masters.size(); ++g) {
      if (use_muon_[g]) continue;
      ops::AdamParams hp;
      hp.lr = lrs_[g];
      hp.beta1 = betas1_[g];
      hp.beta2 = beta2_;
      hp.eps = eps_;
      hp.weight_decay = decays_[g];
      hp.adamw_mode = adam_w_mode_;
      ops::adam_step(masters[g].detach(), grads[g], first_[g], second_[g], hp, step_);
    }
    // Muon's matrices in batches, the same on every rank (shapes_ is): each batch one all-reduce.
    std::vector<std::pair<size_t, size_t>> batch;
    int64_t batch_numel = 0;
    for (size_t g = 0; g < masters.size(); ++g) {
      if (!use_muon_[g]) continue;
      for (size_t i = 0; i < shapes_[g].size(); ++i) {
        const int64_t n = c10::multiply_integers(shapes_[g][i]);
        if (!batch.empty() && batch_numel + n > kAssembleElements) {
          step_batch(batch, batch_numel, masters, grads);
          batch.clear();
          batch_numel = 0;
        }
        batch.emplace_back(g, i);
        batch_numel += n;
      }
    }
    if (!batch.empty()) step_batch(batch, batch_numel, masters, grads);
  }

  int64_t state_bytes() const override {
    int64_t bytes = 0;
    for (const auto& t : state_tensors()) bytes += t.nbytes();
    return bytes;
  }
  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> out = first_;
    for (const auto& t : second_)
      if (t.defined()) out.push_back(t);
    return out;
  }
  std::string name() const override { return "muon"; }
  // One layout for every group: a Muon group's momentum is saved as exp_avg, its exp_avg_sq as zeros (a temporary,
  // so a load writes into it and it is dropped: nothing is held for it between steps).
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<at::Tensor> group_state(size_t group) const override {
    if (use_muon_.at(group)) return {first_[group], at::zeros_like(first_[group])};
    return {first_.at(group), second_.at(group)};
  }

 private:
  static at::Tensor piece(const std::vector<at::Tensor>& flat, const zero::MasterFragment& f) {
    return flat.at(f.group).detach().narrow(0, f.offset, f.end - f.begin);
  }

  // Nesterov updates of this rank's pieces into one buffer of the batch's whole matrices, summed over the ranks
  // (each element is held by exactly one), then every matrix this rank holds a piece of is orthogonalized and its
  // pieces move: p = p * (1 - lr * weight_decay) - lr * O.
  void step_batch(const std::vector<std::pair<size_t, size_t>>& batch, int64_t numel,
                  const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads) {
    at::Tensor whole = at::zeros({numel}, masters[batch.front().first].options().dtype(at::kFloat));
    std::vector<int64_t> base;
    int64_t cursor = 0;
    for (const auto& [g, i] : batch) {
      base.push_back(cursor);
      for (const zero::MasterFragment& f : pieces_[g][i]) {
        const at::Tensor u = ops::muon_momentum(piece(grads, f), piece(first_, f), betas1_[g]);
        whole.narrow(0, cursor + f.begin, f.end - f.begin).copy_(u);
      }
      cursor += c10::multiply_integers(shapes_[g][i]);
    }
    if (partitioned_ && group_.size() > 1) group_.all_reduce(whole, comm::ReduceOp::kSum);
    for (size_t b = 0; b < batch.size(); ++b) {
      const auto [g, i] = batch[b];
      if (pieces_[g][i].empty()) continue;
      const std::vector<int64_t>& shape = shapes_[g][i];
      const at::Tensor matrix = whole.narrow(0, base[b], c10::multiply_integers(shape)).view(shape);
      const at::Tensor o = ops::muon_orthogonalize(matrix, ns_steps_, ns_method_).reshape({-1});
      for (const zero::MasterFragment& f : pieces_[g][i]) {
        at::Tensor p = piece(masters, f);
        if (decays_[g] != 0) p.mul_(1.0 - lrs_[g] * decays_[g]);
        p.add_(o.narrow(0, f.begin, f.end - f.begin), -lrs_[g]);
      }
    }
  }

  std::vector<std::vector<std::vector<int64_t>>> shapes_;
  // pieces_[g][i]: where this rank holds parameter i of Muon group g (empty: held by other ranks only).
  std::vector<std::vector<std::vector<zero::MasterFragment>>> pieces_;
  bool partitioned_;
  comm::ProcessGroup group_;
  std::vector<bool> use_muon_;
  double beta2_ = 0.95, eps_ = 1e-10;
  bool adam_w_mode_ = true;
  int64_t ns_steps_ = 5;
  ops::NewtonSchulz ns_method_ = ops::NewtonSchulz::kGram;
  std::vector<at::Tensor> first_, second_;  // momentum (Muon groups) or Adam's exp_avg; exp_avg_sq (Adam groups)
};

}  // namespace

std::unique_ptr<EngineOptimizer> make_muon_optimizer(const config::OptimizerConfig& cfg,
                                                     const std::vector<zero::FlatGroup>& groups,
                                                     const std::vector<at::Tensor>& masters,
                                                     std::vector<std::vector<std::vector<int64_t>>> shapes,
                                                     std::vector<zero::MasterFragment> fragments, bool partitioned,
                                                     comm::ProcessGroup group) {
  return std::make_unique<MuonOptimizer>(cfg, groups, masters, std::move(shapes), std::move(fragments), partitioned,
                                         std::move(group));
}

}  // namespace deepspeed::runtime
