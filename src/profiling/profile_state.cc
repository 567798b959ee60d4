// RecordFunction::inputs() asserts a flag that only a debug build of LibTorch sets; Debian's
// LibTorch is a release build, so a debug build of deepspeed-cpp would trip it on every operator.
// This file reads inputs only inside the start callback, where they are valid, so the check is
// disabled here (before any header is read).
#ifndef NDEBUG
#define NDEBUG
#endif

#include "profiling/profile_state.h"

#include <ATen/record_function.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"
#include "profiling/op_flops.h"

namespace deepspeed::profiling::detail {
namespace {

thread_local ProfileState* t_current = nullptr;

std::unique_ptr<at::ObserverContext> start_callback(const at::RecordFunction& fn) {
  if (ProfileState* state = t_current) {
    try {
      state->on_op_start(fn);
    } catch (...) {
      // A profiler must never break the model's forward; a miscounted operator is the lesser harm.
    }
  }
  return nullptr;
}

void end_callback(const at::RecordFunction& fn, at::ObserverContext* /*ctx*/) {
  if (ProfileState* state = t_current) state->on_op_end();
}

bool is_autograd_range(const at::RecordFunction& fn) {
  return fn.scope() == at::RecordScope::BACKWARD_FUNCTION ||
         std::strncmp(fn.name(), "autograd::", 10) == 0;
}

}  // namespace

ProfileState::ProfileState(const torch::nn::Module& root,
                           const std::function<int64_t(const at::Tensor&)>& numel)
    : tree_(root, numel), synchronize_(!accelerator::get_accelerator().device().is_cpu()) {}

ProfileState::~ProfileState() {
  if (!active()) return;
  if (std::this_thread::get_id() == thread_) {
    deactivate();
  } else {
    std::fprintf(stderr,
                 "deepspeed: flops profiler destroyed on another thread than the one profiling\n");
  }
}

ProfileState* ProfileState::current() { return t_current; }

void ProfileState::activate() {
  if (active()) return;
  DS_CHECK(t_current == nullptr,
           "flops profiler: another profiler is already active on this thread");
  ops_.clear();
  scopes_.clear();
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&start_callback, &end_callback)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  thread_ = std::this_thread::get_id();
  t_current = this;
}

void ProfileState::deactivate() {
  if (!active()) return;
  DS_CHECK(std::this_thread::get_id() == thread_,
           "flops profiler: stop_profile must run on the thread that called start_profile");
  at::removeCallback(handle_);
  handle_ = 0;
  t_current = nullptr;
  ops_.clear();
  scopes_.clear();
}

void ProfileState::reset_counts() {
  for (auto& node : tree_.nodes()) {
    node.flops = 0;
    node.macs = 0;
    node.seconds = 0;
  }
}

size_t ProfileState::push_scope(const torch::nn::Module& module) {
  const int node = tree_.find_module(&module);
  if (node < 0) return 0;
  scopes_.push_back(node);
  return scopes_.size();
}

void ProfileState::pop_scope(size_t size) {
  if (size != 0 && scopes_.size() == size) scopes_.pop_back();
}

int ProfileState::charge_target(c10::ArrayRef<const c10::IValue> inputs) const {
  const int scope = scopes_.empty() ? -1 : scopes_.back();
  for (const auto& v : inputs) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) continue;
    const int owner = tree_.find_param_owner(t);
    if (owner < 0) continue;
    // A parameter of a module inside the open scope: that module did the work (a Linear inside
    // attention).
    if (scope < 0 || tree_.contains(scope, owner)) return owner;
    break;
  }
  return scope >= 0 ? scope : 0;
}

void ProfileState::on_op_start(const at::RecordFunction& fn) {
  const bool inside_ignored = !ops_.empty() && ops_.back().ignored;
  const bool inside_counted = !ops_.empty() && ops_.back().counted;
  const bool top = ops_.empty();
  ops_.emplace_back();
  OpFrame& frame = ops_.back();
  if (inside_ignored || is_autograd_range(fn)) {
    frame.ignored = true;
    return;
  }
  frame.top = top;
  frame.counted = inside_counted;
  OpCost cost;
  const bool charge = !inside_counted && op_cost(std::string_view(fn.name()), fn.inputs(), &cost);
  if (charge || top) frame.node = charge_target(fn.inputs());
  if (charge) {
    frame.counted = true;
    ModuleNode& node = tree_.nodes()[static_cast<size_t>(frame.node)];
    node.flops += cost.flops;
    node.macs += cost.macs;
  }
  if (top) {
    // On a GPU an operator returns once queued: wait for what came before, so the span is this operator's.
    if (synchronize_) accelerator::get_accelerator().synchronize();
    frame.start = std::chrono::steady_clock::now();
  }
}

void ProfileState::on_op_end() {
  if (ops_.empty()) return;
  const OpFrame frame = ops_.back();
  ops_.pop_back();
  if (!frame.top || frame.ignored || frame.node < 0) return;
  if (synchronize_) accelerator::get_accelerator().synchronize();  // ... and for it to finish
  const auto elapsed = std::chrono::steady_clock::now() - frame.start;
  tree_.nodes()[static_cast<size_t>(frame.node)].seconds +=
      std::chrono::duration<double>(elapsed).count();
}

}  // namespace deepspeed::profiling::detail
