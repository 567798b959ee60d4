// The flops profiler's live state: the module tree being charged, the operator and ModuleScope
// stacks of the profiling thread, and the RecordFunction callback that feeds them
// (include/deepspeed/profiling/flops_profiler.h describes what is counted and where it is charged).
//
// Thread-safety: one thread. activate() registers a thread-local callback on the calling thread and
// makes this the thread's current state; deactivate() must run on that thread.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "profiling/module_tree.h"

namespace at {
struct RecordFunction;
}  // namespace at

namespace deepspeed::profiling::detail {

class ProfileState {
 public:
  // `numel`: a parameter's element count (null: numel()).
  ProfileState(const torch::nn::Module& root,
               const std::function<int64_t(const at::Tensor&)>& numel);
  ~ProfileState();
  ProfileState(const ProfileState&) = delete;
  ProfileState& operator=(const ProfileState&) = delete;

  // This thread's active state, or null.
  static ProfileState* current();

  void activate();
  void deactivate();
  bool active() const { return handle_ != 0; }
  void reset_counts();
  const ModuleTree& tree() const { return tree_; }

  // ModuleScope: pushes `module`'s node and returns the scope stack's new size, or 0 when `module`
  // is not in the tree. pop_scope(size) pops it if it is still on top.
  size_t push_scope(const torch::nn::Module& module);
  void pop_scope(size_t size);

  void on_op_start(const at::RecordFunction& fn);
  void on_op_end();

 private:
  struct OpFrame {
    bool ignored = false;  // autograd's backward and what runs inside it
    bool counted = false;  // this operator or one enclosing it had a formula
    bool top = false;      // no enclosing operator: its wall time is charged
    int node = -1;
    std::chrono::steady_clock::time_point start;
  };
  int charge_target(c10::ArrayRef<const c10::IValue> inputs) const;

  ModuleTree tree_;
  // The device runs operators asynchronously (not the CPU): time each top-level one between synchronizations,
  // which serializes the device while the profiler counts (the profile step only).
  bool synchronize_ = false;
  std::vector<int> scopes_;
  std::vector<OpFrame> ops_;
  uint64_t handle_ = 0;  // at::CallbackHandle of the registered callback; 0: inactive
  std::thread::id thread_;
};

}  // namespace deepspeed::profiling::detail
