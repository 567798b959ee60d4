#include "runtime/optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <sstream>

#include "deepspeed/error.h"
#include "deepspeed/ops.h"

namespace deepspeed::runtime {
namespace {

using config::Params;

// Per-group optimizer state: up to two flat fp32 tensors shaped like the group's buffer.
struct GroupState {
  at::Tensor first, second;
};

class FusedOptimizer final : public EngineOptimizer {
 public:
  enum class Kind { kAdam, kSgd, kAdagrad, kLion };

  FusedOptimizer(Kind kind, const config::OptimizerConfig& cfg, const std::vector<zero::FlatGroup>& groups,
                 const std::vector<at::Tensor>& masters, bool resident_state, at::ScalarType state_dtype)
      : kind_(kind), type_(cfg.type) {
    const Params& p = cfg.params;
    switch (kind_) {
      case Kind::kAdam: {
        std::vector<double> betas = p.get_number_list("betas", {0.9, 0.999});
        DS_CHECK_T(ConfigError, betas.size() == 2, "optimizer.params.betas: expected 2 numbers, got ",
                   betas.size());
        adam_.beta1 = betas[0];
        adam_.beta2 = betas[1];
        adam_.eps = p.get_number("eps", 1e-8);
        adam_.weight_decay = p.get_number("weight_decay", 0.0);
        // DeepSpeed's "Adam" defaults to decoupled decay (adam_w_mode true); "AdamW" always decouples.
        adam_.adamw_mode = cfg.type == "adamw" ? true : p.get_bool("adam_w_mode", true);
        adam_.bias_correction = p.get_bool("bias_correction", true);
        DS_CHECK_T(ConfigError, !p.get_bool("amsgrad", false),
                   "optimizer.params.amsgrad: true is not supported by the fused CPU Adam (as in DeepSpeed)");
        break;
      }
      case Kind::kSgd:
        sgd_.momentum = p.get_number("momentum", 0.0);
        sgd_.dampening = p.get_number("dampening", 0.0);
        sgd_.weight_decay = p.get_number("weight_decay", 0.0);
        sgd_.nesterov = p.get_bool("nesterov", false);
        break;
      case Kind::kAdagrad:
        adagrad_.eps = p.get_number("eps", 1e-10);
        adagrad_.weight_decay = p.get_number("weight_decay", 0.0);
        adagrad_.lr_decay = p.get_number("lr_decay", 0.0);
        adagrad_.initial_accumulator_value = p.get_number("initial_accumulator_value", 0.0);
        DS_CHECK_T(ConfigError, !p.get_bool("amsgrad", false), "optimizer.params.amsgrad: not supported by Adagrad");
        break;
      case Kind::kLion: {
        std::vector<double> betas = p.get_number_list("betas", {0.9, 0.99});
        DS_CHECK_T(ConfigError, betas.size() == 2, "optimizer.params.betas: expected 2 numbers, got ",
                   betas.size());
        lion_.beta1 = betas[0];
        lion_.beta2 = betas[1];
        lion_.weight_decay = p.get_number("weight_decay", 0.0);
        break;
      }
    }
    double lr = configured_lr(cfg);
    for (size_t i = 0; i < groups.size(); ++i) {
      const zero::FlatGroup& g = groups[i];
      lrs_.push_back(g.lr.value_or(lr));
      decays_.push_back(g.weight_decay.value_or(default_weight_decay()));
      momenta_.push_back(kind_ == Kind::kSgd ? sgd_.momentum : kind_ == Kind::kAdam ? adam_.beta1 : lion_.beta1);
      GroupState s;
      // Step 1 of every kernel ignores the incoming state, so uninitialized memory is fine.
      bool needs_second = kind_ == Kind::kAdam;
      bool needs_first = kind_ != Kind::kSgd || sgd_.momentum != 0.0;
      const auto options = masters[i].options().dtype(state_dtype);
      if (resident_state && needs_first) s.first = at::empty_like(masters[i], options);
      if (resident_state && needs_second) s.second = at::empty_like(masters[i], options);
      state_.push_back(s);
    }
  }

  void step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads) override {
    begin_step();
    for (size_t i = 0; i < masters.size(); ++i)
      update(i, masters[i], grads[i], state_[i].first, state_[i].second,
             copy_back_.empty() ? at::Tensor() : copy_back_[i]);
  }

  bool set_copy_back(const std::vector<at::Tensor>& targets) override {
    DS_ASSERT(targets.empty() || targets.size() == state_.size(), "one copy-back target per group");
    copy_back_ = targets;
    return true;
  }

  int num_states() const override {
    switch (kind_) {
      case Kind::kAdam: return 2;
      case Kind::kSgd: return sgd_.momentum != 0.0 ? 1 : 0;
      default: return 1;
    }
  }

  void begin_step() override { ++step_; }

  void step_slice(size_t i, const at::Tensor& master, const at::Tensor& grad, const at::Tensor& first,
                  const at::Tensor& second, const at::Tensor& copy) override {
    update(i, master, grad, first, second, copy);
  }

  double lr(size_t group) const override { return lrs_.at(group); }
  void set_lr(size_t group, double lr) override { lrs_.at(group) = lr; }
  bool set_momentum(size_t group, double momentum) override {
    if (kind_ == Kind::kAdagrad) return false;
    momenta_.at(group) = momentum;
    return true;
  }
  std::string name() const override { return "fused cpu " + type_; }

  std::vector<std::string> state_names() const override {
    switch (kind_) {
      case Kind::kAdam: return {"exp_avg", "exp_avg_sq"};
      case Kind::kSgd: return sgd_.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                                                   : std::vector<std::string>{};
      case Kind::kAdagrad: return {"sum"};
      case Kind::kLion: return {"exp_avg"};
    }
    return {};
  }
  std::vector<at::Tensor> group_state(size_t group) const override {
    const GroupState& s = state_.at(group);
    std::vector<at::Tensor> out;
    const size_t n = state_names().size();
    if (n > 0) out.push_back(s.first);
    if (n > 1) out.push_back(s.second);
    return out;
  }
  int64_t step_count() const override { return step_; }
  void set_step_count(int64_t steps) override { step_ = steps; }
  std::optional<double> momentum(size_t group) const override {
    if (kind_ == Kind::kAdagrad) return std::nullopt;
    return momenta_.at(group);
  }
  std::optional<double> weight_decay(size_t group) const override { return decays_.at(group); }
  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> out;
    for (const auto& s : state_)
      for (const auto* t : {&s.first, &s.second})
        if (t->defined()) out.push_back(*t);
    return out;
  }

  int64_t state_bytes() const override {
    int64_t bytes = 0;
    for (const auto& s : state_) {
      if (s.first.defined()) bytes += s.first.nbytes();
      if (s.second.defined()) bytes += s.second.nbytes();
    }
    return bytes;
  }

 private:
  // One group's (or slice's) update; `copy` is undefined or the group's copy-back target.
  void update(size_t i, const at::Tensor& master, const at::Tensor& grad, const at::Tensor& first,
              const at::Tensor& second, const at::Tensor& copy) {
    switch (kind_) {
      case Kind::kAdam: {
        ops::AdamParams hp = adam_;
        hp.lr = lrs_[i];
        hp.beta1 = momenta_[i];
        hp.weight_decay = decays_[i];
        ops::adam_step(master, grad, first, second, hp, step_, ops::SimdLevel::kAuto, copy);
        break;
      }
      case Kind::kSgd: {
        ops::SgdParams hp = sgd_;
        hp.lr = lrs_[i];
        hp.momentum = momenta_[i];
        hp.weight_decay = decays_[i];
        ops::sgd_step(master, grad, first, hp, step_, ops::SimdLevel::kAuto, copy);
        break;
      }
      case Kind::kAdagrad: {
        ops::AdagradParams hp = adagrad_;
        hp.lr = lrs_[i];
        hp.weight_decay = decays_[i];
        ops::adagrad_step(master, grad, first, hp, step_, ops::SimdLevel::kAuto, copy);
        break;
      }
      case Kind::kLion: {
        ops::LionParams hp = lion_;
        hp.lr = lrs_[i];
        hp.beta1 = momenta_[i];
        hp.weight_decay = decays_[i];
        ops::lion_step(master, grad, first, hp, step_, ops::SimdLevel::kAuto, copy);
        break;
      }
    }
  }

  double default_weight_decay() const {
    switch (kind_) {
      case Kind::kAdam: return adam_.weight_decay;
      case Kind::kSgd: return sgd_.weight_decay;
      case Kind::kAdagrad: return adagrad_.weight_decay;
      case Kind::kLion: return lion_.weight_decay;
    }
    return 0.0;
  }

  Kind kind_;
  std::string type_;
  ops::AdamParams adam_;
  ops::SgdParams sgd_;
  ops::AdagradParams adagrad_;
  ops::LionParams lion_;
  std::vector<double> lrs_, decays_, momenta_;
  std::vector<GroupState> state_;
  std::vector<at::Tensor> copy_back_;  // empty: no fused copy-back
  int64_t step_ = 0;
};

class ClientOptimizer final : public EngineOptimizer {
 public:
  explicit ClientOptimizer(std::shared_ptr<torch::optim::Optimizer> opt) : opt_(std::move(opt)) {
    DS_CHECK(opt_ != nullptr, "initialize: options.optimizer is null");
  }
  void step(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&) override { opt_->step(); }
  // torch::optim keeps its state behind type-erased per-parameter objects; it is not accounted.
  int64_t state_bytes() const override { return 0; }
  double lr(size_t group) const override { return opt_->param_groups().at(group).options().get_lr(); }
  void set_lr(size_t group, double lr) override { opt_->param_groups().at(group).options().set_lr(lr); }
  bool set_momentum(size_t group, double momentum) override {
    auto& options = opt_->param_groups().at(group).options();
    if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
      adam->betas({momentum, std::get<1>(adam->betas())});
      return true;
    }
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
      adamw->betas({momentum, std::get<1>(adamw->betas())});
      return true;
    }
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
      sgd->momentum(momentum);
      return true;
    }
    return false;
  }
  std::string name() const override { return "client torch::optim optimizer"; }

  std::string archive() const override {
    torch::serialize::OutputArchive out;
    opt_->save(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    return bytes.str();
  }
  void restore_archive(const std::string& bytes) override {
    torch::serialize::InputArchive in;
    in.load_from(bytes.data(), bytes.size());
    opt_->load(in);
  }

 private:
  std::shared_ptr<torch::optim::Optimizer> opt_;
};

}  // namespace

double configured_lr(const config::OptimizerConfig& cfg) {
  double fallback = cfg.type == "adagrad" ? 1e-2 : 1e-3;
  return cfg.params.get_number("lr", fallback);
}

std::unique_ptr<EngineOptimizer> make_fused_optimizer(const config::OptimizerConfig& cfg,
                                                      const std::vector<zero::FlatGroup>& groups,
                                                      const std::vector<at::Tensor>& masters, bool resident_state,
                                                      at::ScalarType state_dtype) {
  using Kind = FusedOptimizer::Kind;
  DS_ASSERT(groups.size() == masters.size(), "one master tensor per group");
  Kind kind;
  if (cfg.type == "adam" || cfg.type == "adamw") {
    kind = Kind::kAdam;
  } else if (cfg.type == "SGD") {
    kind = Kind::kSgd;
  } else if (cfg.type == "adagrad") {
    kind = Kind::kAdagrad;
  } else if (cfg.type == "lion") {
    kind = Kind::kLion;
  } else if (cfg.type == "lamb" || cfg.type == "muon") {  // (the feature gate refuses them with nvme first)
    throw ConfigError("optimizer.type: " + std::string(cfg.type == "lamb" ? "Lamb" : "Muon") +
                      " runs only with its state in memory, not streamed through nvme offload");
  } else {  // (the 1-bit optimizers never get here: the feature gate refuses them at initialize)
    throw ConfigError("optimizer.type: '" + cfg.type + "' is not implemented in deepspeed-cpp yet (available: Adam, "
                      "AdamW, SGD, Adagrad, Lion, Lamb, Muon)");
  }
  return std::make_unique<FusedOptimizer>(kind, cfg, groups, masters, resident_state, state_dtype);
}

std::unique_ptr<EngineOptimizer> wrap_client_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  return std::make_unique<ClientOptimizer>(std::move(optimizer));
}

}  // namespace deepspeed::runtime
