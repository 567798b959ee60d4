// deepspeed::Engine, the handle users hold (include/deepspeed/deepspeed.h): each call forwards to EngineImpl.
#include <torch/nn/module.h>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "runtime/engine_impl.h"
#include "zero/make_stage.h"
#include "zero/stage_features.h"

namespace deepspeed {

Engine::Engine(torch::nn::AnyModule module, std::shared_ptr<EngineImpl> impl)
    : module_(std::move(module)), impl_(std::move(impl)) {}

void Engine::begin_forward() { impl_->begin_forward(); }
void Engine::end_forward() { impl_->end_forward(); }
void Engine::backward(const at::Tensor& loss) { impl_->backward(loss); }
void Engine::step() { impl_->step(); }
void Engine::add_trained_tokens(int64_t tokens) { impl_->tokens_.add(tokens); }
void Engine::train(bool on) { impl_->module_->train(on); }
bool Engine::is_training() const { return impl_->module_->is_training(); }
bool Engine::is_gradient_accumulation_boundary() const { return impl_->is_boundary(); }
int64_t Engine::global_steps() const { return impl_->global_steps_; }
int64_t Engine::micro_steps() const { return impl_->micro_steps_; }
int64_t Engine::global_samples() const { return impl_->global_samples(); }
std::vector<double> Engine::get_lr() const { return impl_->get_lr(); }
double Engine::get_global_grad_norm() const { return impl_->global_grad_norm_; }
double Engine::loss_scale() const { return impl_->scaler_ ? impl_->scaler_->loss_scale() : 1.0; }
int64_t Engine::skipped_steps() const { return impl_->skipped_steps(); }
int Engine::zero_optimization_stage() const { return impl_->config_.zero.stage; }
at::ScalarType Engine::communication_data_type() const { return zero::gradient_communication_dtype(impl_->config_); }
ModelStateBytes Engine::model_state_bytes() const { return impl_->model_state_bytes(); }
void Engine::offload_states(const OffloadStatesOptions& options) { impl_->offload_states(options); }
void Engine::reload_states() { impl_->offloader_.reload(); }
int64_t Engine::offloaded_state_bytes() const { return impl_->offloader_.offloaded_bytes(); }
zero::Stage3Stats Engine::stage3_stats() const {
  zero::Stage3Stats s = impl_->stage_->stats();
  impl_->step_->add_stats(s);
  return s;
}
void Engine::reset_stage3_peaks() {
  if (auto* peaks = zero::feature<zero::PeakCounters>(*impl_->stage_)) peaks->reset_peaks();
}
int Engine::local_rank() const { return comm::get_local_rank(); }
c10::Device Engine::device() const { return impl_->device_; }
int Engine::global_rank() const { return comm::get_rank(); }
int Engine::world_size() const { return comm::get_world_size(); }
int Engine::dp_world_size() const { return impl_->config_.dp_world_size; }
int Engine::dp_rank() const { return impl_->layout_.data_parallel.rank() / impl_->layout_.sequence_parallel; }
int Engine::mp_world_size() const {
  return impl_->layout_.model_parallel.is_member() ? impl_->layout_.model_parallel.size() : 1;
}
int64_t Engine::train_batch_size() const { return impl_->config_.train_batch_size.value(); }
int64_t Engine::train_micro_batch_size_per_gpu() const {
  return impl_->config_.train_micro_batch_size_per_gpu.value();
}
int64_t Engine::gradient_accumulation_steps() const { return impl_->config_.gradient_accumulation_steps.value(); }
const Config& Engine::config() const { return impl_->config_; }
std::vector<at::Tensor> Engine::parameters() const { return impl_->parameters(); }

Engine initialize(torch::nn::AnyModule model, const Config& config, InitializeOptions options) {
  DS_CHECK(!model.is_empty(), "initialize: model is empty");
  auto impl = std::make_shared<EngineImpl>(model.ptr(), config, std::move(options));
  return Engine(std::move(model), std::move(impl));
}

runtime::StageEngineParts runtime::make_stage_engine(std::shared_ptr<torch::nn::Module> module,
                                                     torch::nn::AnyModule any, const Config& config,
                                                     InitializeOptions options) {
  auto impl = std::make_shared<EngineImpl>(std::move(module), config, std::move(options));
  return {impl, Engine(std::move(any), impl)};
}

}  // namespace deepspeed
