// The flops profiler: DeepSpeed's FlopsProfiler (deepspeed/profiling/flops_profiler) for LibTorch
// models. It counts the floating-point operations, multiply-accumulates (MACs), parameters and
// latency of a model's forward pass, per module, and prints DeepSpeed's report ("DeepSpeed Flops
// Profiler", "Aggregated Profile per GPU", "Detailed Profile per GPU"). The engine runs it from the
// config's `flops_profiler` section; it can also be used alone:
//
//   deepspeed::profiling::FlopsProfiler prof(model.ptr());
//   prof.start_profile();
//   auto loss = model->forward(x, y);
//   prof.stop_profile();
//   prof.print_model_profile();
//   prof.end_profile();
//
// How it counts. LibTorch C++ modules have no forward hooks, so the profiler watches ATen operators
// instead (a thread-local RecordFunction callback on the thread that called start_profile). Each
// operator it has a formula for (linear, matmul/mm/bmm, addmm/baddbmm, convolutions,
// normalisations, softmax, activations, pooling, element-wise add/sub/mul/div, embedding and
// dropout at zero, ...) is counted with DeepSpeed's formula for it; an operator that runs inside a
// counted operator (aten::linear -> aten::addmm) is not counted again. Operators run by autograd's
// backward are ignored. Formulas follow the operators LibTorch actually runs: torch::nn::Linear on
// a 3-d input is aten::matmul (2 * MACs) plus an in-place bias add (one flop per output element),
// on a 2-d input aten::addmm.
//
// How it attributes. An operator is charged to one module:
//   1. the module owning a parameter among its inputs (or the base of a view of one, as
//      weight.t() in Linear), when that module lies inside the innermost open ModuleScope (or no
//      scope is open);
//   2. otherwise the innermost open ModuleScope;
//   3. otherwise the root module.
// A model marks the modules whose forward does more than call submodules (attention, a block's
// residual adds) with a ModuleScope at the top of their forward. A tied weight used outside its
// module (an LM head multiplying by the token embedding's weight) is charged to the module that
// registered it.
//
// Latency. A module's latency is the summed wall time of the operators charged to it and to its
// submodules, not the time between entering and leaving its forward (which DeepSpeed measures
// with hooks): time spent outside ATen operators is in no module's latency.
//
// Thread-safety: a profiler is driven from one thread; it sees operators run on that thread only.
// At most one profiler is active per thread. ModuleScope is a no-op on threads without an active
// profiler.
#pragma once

#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::profiling {

namespace detail {
class ProfileState;
}  // namespace detail

// Marks `module`'s forward for attribution (see above): operators run while the scope lives are
// charged to `module` unless they use a parameter of one of its submodules. Costs one thread-local
// read when no profiler is active. Typical use, first line of a forward:
// `deepspeed::profiling::ModuleScope scope(*this);`
class ModuleScope {
 public:
  explicit ModuleScope(const torch::nn::Module& module);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  detail::ProfileState* state_ = nullptr;  // the profiler this scope was opened in, if any
  size_t depth_ = 0;                       // its scope stack size after the push
};

// One module's profile, with everything of its submodules included (DeepSpeed's
// get_module_flops/macs/duration).
struct ModuleProfile {
  std::string name;    // dotted path as named_modules() names it; "" for the root
  std::string type;    // short class name: "Linear", "GPTBlock"
  int depth = 0;       // 0 for the root
  int64_t params = 0;  // parameters of the module and its submodules (a shared tensor counted once)
  int64_t flops = 0;
  int64_t macs = 0;
  double latency = 0;  // seconds
};

// What the engine knows about the profiled step; printed in the summary as DeepSpeed prints its
// engine's values.
struct TrainingInfo {
  int world_size = 1;
  int dp_world_size = 1;
  int mp_world_size = 1;
  int64_t micro_batch_size = 0;  // "batch size per GPU"
  // Samples the latencies below cover, over all data-parallel ranks.
  int64_t samples_per_iter = 0;
  // Wall time of the profiled step, in seconds: its forwards, backwards and step() calls.
  double fwd_latency = 0;
  double bwd_latency = 0;
  double step_latency = 0;
};

// print_model_profile's choices (DeepSpeed's arguments of the same names).
struct PrintOptions {
  int64_t profile_step = 1;
  int module_depth = -1;  // aggregated profile: depths 0 .. module_depth - 1; -1: every depth
  int top_modules = 1;
  bool detailed = true;                    // also print the module tree
  std::optional<std::string> output_file;  // overwritten (its folder created); unset: stdout
  // Set by the engine: sizes and measured fwd/bwd/step latency. Unset: the forward latency is the
  // profiler's own measure and no backward lines are printed.
  std::optional<TrainingInfo> training;
};

class FlopsProfiler {
 public:
  // `recompute_fwd_factor`: the share of the forward recomputed in backward (activation
  // checkpointing); the report estimates backward flops as (2 + factor) x forward flops, as
  // DeepSpeed does.
  explicit FlopsProfiler(std::shared_ptr<torch::nn::Module> model,
                         double recompute_fwd_factor = 0.0);
  ~FlopsProfiler();
  FlopsProfiler(const FlopsProfiler&) = delete;
  FlopsProfiler& operator=(const FlopsProfiler&) = delete;

  // How many elements a parameter has, for the parameter counts (default: p.numel()). Parameters
  // whose storage is partitioned (ZeRO-3 releases them between uses) need their full count; the
  // engine sets this at stage 3, as DeepSpeed's profiler reads ds_numel. Read at start_profile.
  using ParameterNumel = std::function<int64_t(const at::Tensor&)>;
  void set_parameter_numel(ParameterNumel numel);

  // Clears the counts (and re-reads the module tree), then counts operators run on this thread
  // until stop_profile. Throws if another profiler is active on this thread.
  void start_profile();
  // Counts again after stop_profile, keeping what was counted (the engine sums a step's
  // micro-batches).
  void continue_profile();
  // Stops counting; the counts stay readable until end_profile. Call on the thread that started.
  void stop_profile();
  // Zeroes the counts (parameter counts stay).
  void reset_profile();
  // Stops and forgets everything; the getters return 0 and print_model_profile prints nothing until
  // the next start_profile.
  void end_profile();
  bool started() const;
  bool running() const;  // between start/continue_profile and stop_profile

  int64_t get_total_flops() const;
  int64_t get_total_macs() const;
  int64_t get_total_params() const;
  double get_total_duration() const;  // seconds
  // Every module in pre-order (root first), or the one named `name` (throws if none).
  std::vector<ModuleProfile> module_profiles() const;
  ModuleProfile module_profile(const std::string& name) const;

  // DeepSpeed's report, to options.output_file or stdout. Does nothing unless started.
  void print_model_profile(const PrintOptions& options = {}) const;
  std::string format_model_profile(const PrintOptions& options = {}) const;

 private:
  std::shared_ptr<torch::nn::Module> model_;
  double recompute_fwd_factor_;
  ParameterNumel parameter_numel_;
  std::unique_ptr<detail::ProfileState> state_;
};

// get_model_profile's choices (DeepSpeed's arguments of the same names).
struct ModelProfileOptions {
  bool print_profile = true;
  bool detailed = true;
  int module_depth = -1;
  int top_modules = 1;
  int warm_up = 1;  // unprofiled runs of `forward` first
  std::optional<std::string> output_file;
};

struct ModelProfileResult {
  int64_t flops = 0;
  int64_t macs = 0;
  int64_t params = 0;
};

// Profiles one call of `forward` (which runs `model`, e.g. `[&] { model->forward(x); }`) after
// `warm_up` unprofiled calls, in eval mode (the training flag is restored after), and prints the
// report when print_profile.
ModelProfileResult get_model_profile(const std::shared_ptr<torch::nn::Module>& model,
                                     const std::function<void()>& forward,
                                     const ModelProfileOptions& options = {});

// DeepSpeed's human-readable numbers ("12.35 K", "1.2 GMACs", "3.4 ms"), as the report prints them.
std::string number_to_string(double num);
std::string macs_to_string(double macs);
std::string flops_to_string(double flops);
std::string params_to_string(double params);
std::string duration_to_string(double seconds);

}  // namespace deepspeed::profiling
