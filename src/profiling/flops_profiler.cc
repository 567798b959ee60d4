#include "deepspeed/profiling/flops_profiler.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "deepspeed/error.h"
#include "profiling/profile_report.h"
#include "profiling/profile_state.h"

namespace deepspeed::profiling {

ModuleScope::ModuleScope(const torch::nn::Module& module) {
  detail::ProfileState* state = detail::ProfileState::current();
  if (state == nullptr) return;
  depth_ = state->push_scope(module);
  if (depth_ != 0) state_ = state;
}

ModuleScope::~ModuleScope() {
  // The profiler may have stopped (or another started) while the scope was open: pop only from the
  // one pushed to.
  if (state_ != nullptr && detail::ProfileState::current() == state_) state_->pop_scope(depth_);
}

FlopsProfiler::FlopsProfiler(std::shared_ptr<torch::nn::Module> model, double recompute_fwd_factor)
    : model_(std::move(model)), recompute_fwd_factor_(recompute_fwd_factor) {
  DS_CHECK(model_ != nullptr, "FlopsProfiler: model is null");
}

FlopsProfiler::~FlopsProfiler() = default;

void FlopsProfiler::set_parameter_numel(ParameterNumel numel) {
  parameter_numel_ = std::move(numel);
}

void FlopsProfiler::start_profile() {
  if (state_) state_->deactivate();
  state_ = std::make_unique<detail::ProfileState>(*model_, parameter_numel_);
  state_->activate();
}

void FlopsProfiler::continue_profile() {
  DS_CHECK(state_ != nullptr, "FlopsProfiler: continue_profile before start_profile");
  state_->activate();
}

void FlopsProfiler::stop_profile() {
  if (state_) state_->deactivate();
}

void FlopsProfiler::reset_profile() {
  if (state_) state_->reset_counts();
}

void FlopsProfiler::end_profile() {
  stop_profile();
  state_.reset();
}

bool FlopsProfiler::started() const { return state_ != nullptr; }
bool FlopsProfiler::running() const { return state_ != nullptr && state_->active(); }

int64_t FlopsProfiler::get_total_flops() const {
  return state_ ? state_->tree().subtree_flops(0) : 0;
}
int64_t FlopsProfiler::get_total_macs() const {
  return state_ ? state_->tree().subtree_macs(0) : 0;
}
int64_t FlopsProfiler::get_total_params() const {
  return state_ ? state_->tree().nodes()[0].params : 0;
}
double FlopsProfiler::get_total_duration() const {
  return state_ ? state_->tree().subtree_seconds(0) : 0.0;
}

std::vector<ModuleProfile> FlopsProfiler::module_profiles() const {
  std::vector<ModuleProfile> out;
  if (!state_) return out;
  const detail::ModuleTree& tree = state_->tree();
  for (size_t i = 0; i < tree.nodes().size(); ++i) {
    const detail::ModuleNode& n = tree.nodes()[i];
    ModuleProfile p;
    p.name = n.name;
    p.type = n.type;
    p.depth = n.depth;
    p.params = n.params;
    p.flops = tree.subtree_flops(static_cast<int>(i));
    p.macs = tree.subtree_macs(static_cast<int>(i));
    p.latency = tree.subtree_seconds(static_cast<int>(i));
    out.push_back(std::move(p));
  }
  return out;
}

ModuleProfile FlopsProfiler::module_profile(const std::string& name) const {
  for (auto& p : module_profiles())
    if (p.name == name) return p;
  DS_CHECK(false, "FlopsProfiler: no module named \"", name, "\" (or the profiler is not started)");
  return {};
}

std::string FlopsProfiler::format_model_profile(const PrintOptions& options) const {
  return state_ ? detail::format_report(state_->tree(), options, recompute_fwd_factor_) : "";
}

void FlopsProfiler::print_model_profile(const PrintOptions& options) const {
  if (!state_) return;
  const std::string report = format_model_profile(options);
  if (!options.output_file || options.output_file->empty()) {
    std::fwrite(report.data(), 1, report.size(), stdout);
    std::fflush(stdout);
    return;
  }
  const std::filesystem::path path = std::filesystem::absolute(*options.output_file);
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::trunc);
  out << report;
  DS_CHECK(out.good(), "flops profiler: cannot write ", path.string());
}

ModelProfileResult get_model_profile(const std::shared_ptr<torch::nn::Module>& model,
                                     const std::function<void()>& forward,
                                     const ModelProfileOptions& options) {
  DS_CHECK(model != nullptr && forward, "get_model_profile: needs a model and a forward function");
  struct RestoreMode {
    torch::nn::Module& m;
    bool training;
    ~RestoreMode() { m.train(training); }
  } restore{*model, model->is_training()};
  model->eval();
  for (int i = 0; i < options.warm_up; ++i) forward();
  FlopsProfiler prof(model);
  prof.start_profile();
  forward();
  prof.stop_profile();
  ModelProfileResult result{prof.get_total_flops(), prof.get_total_macs(), prof.get_total_params()};
  if (options.print_profile) {
    PrintOptions print;
    print.detailed = options.detailed;
    print.module_depth = options.module_depth;
    print.top_modules = options.top_modules;
    print.output_file = options.output_file;
    prof.print_model_profile(print);
  }
  return result;
}

}  // namespace deepspeed::profiling
