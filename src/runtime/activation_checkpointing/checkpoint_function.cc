// checkpoint(): a reentrant custom autograd Function. Forward runs the segment without a graph and
// saves only its inputs (moved or copied as the settings ask); backward restores the forward-time
// RNG state, reruns the segment with grad enabled on detached copies of the inputs and
// back-propagates through it with a nested torch::autograd::backward, which accumulates the
// parameters' gradients and yields the inputs' gradients.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <map>
#include <string>

#include "deepspeed/accelerator.h"
#include "deepspeed/checkpointing.h"
#include "deepspeed/error.h"
#include "runtime/activation_checkpointing/checkpoint_state.h"

namespace deepspeed::checkpointing {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Random-number state of the CPU generator and, where the accelerator is a device with its own
// generator, of the current device's generator: everything dropout inside a segment can draw from.
struct RngState {
  at::Tensor cpu;
  at::Tensor device;

  static RngState capture() {
    RngState s;
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      s.cpu = gen.get_state();
    }
    auto& acc = accelerator::get_accelerator();
    if (acc.name() != "cpu") s.device = acc.get_rng_state();
    return s;
  }

  void restore() const {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(cpu);
    }
    if (device.defined()) accelerator::get_accelerator().set_rng_state(device);
  }
};

// Times a profile timer for the scope when `on`.
class ScopedTimer {
 public:
  ScopedTimer(bool on, const char* name) : name_(on ? name : nullptr) {
    if (name_) CheckpointState::instance().timer_start(name_);
  }
  ~ScopedTimer() {
    if (name_) CheckpointState::instance().timer_stop(name_);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  const char* name_;
};

// One checkpointed segment: what backward needs besides the saved tensors (held by the autograd
// context).
struct Segment : torch::CustomClassHolder {
  SegmentFn fn;
  config::ActivationCheckpointingConfig settings;
  // Per user input: its index among the defined tensors handed to autograd, or -1 for an undefined
  // one.
  std::vector<int> input_slot;
  size_t num_defined = 0;
  // Per defined input: how to give back the tensor fn saw from the saved one.
  std::vector<bool> requires_grad;
  std::vector<c10::Device> device;
  std::vector<std::vector<int64_t>> sizes;
  // Per user output: its index among the Function's outputs, or -1 for an undefined one.
  std::vector<int> output_slot;
  RngState rng;
  int64_t saved_bytes = 0;
  int64_t host_bytes = 0;
  bool accounted = false;

  void account(int64_t bytes, int64_t host) {
    saved_bytes = bytes;
    host_bytes = host;
    accounted = true;
    CheckpointState::instance().add_saved(bytes, host);
  }
  void release_account() {
    if (!accounted) return;
    accounted = false;
    CheckpointState::instance().remove_saved(saved_bytes, host_bytes);
  }
  ~Segment() override { release_account(); }
};

bool moves_input(const config::ActivationCheckpointingConfig& s, const at::Tensor& t) {
  // DeepSpeed partitions, offloads and packs floating-point activations only; ids and masks stay as
  // they are.
  return t.is_floating_point() &&
         (s.partition_activations || s.cpu_checkpointing || s.contiguous_memory_optimization);
}

// The tensors a segment keeps for backward, following the settings; fills seg's per-input records.
variable_list save_inputs(Segment& seg, at::TensorList inputs) {
  const auto& s = seg.settings;
  auto& acc = accelerator::get_accelerator();
  variable_list saved(inputs.size());
  int64_t bytes = 0, host = 0;
  // Inputs headed for a contiguous buffer, grouped by the device that buffer lives on.
  std::map<std::string, std::vector<size_t>> packed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    seg.requires_grad.push_back(in.requires_grad());
    seg.device.push_back(in.device());
    seg.sizes.push_back(in.sizes().vec());
    if (!moves_input(s, in)) {
      saved[i] = in;
      continue;
    }
    // partition_activations with a model-parallel world of one: the partition is the whole tensor,
    // kept flat.
    at::Tensor t = s.partition_activations ? in.detach().reshape({-1}) : in.detach();
    const bool to_host = s.cpu_checkpointing && !t.device().is_cpu();
    if (s.contiguous_memory_optimization) {
      packed[to_host ? std::string("cpu") : t.device().str()].push_back(i);
      saved[i] = t;
      continue;
    }
    if (to_host) {
      // Pinned from the start (the caching host allocator reuses its blocks from one forward to the next), and
      // down without blocking: backward's copy up is queued on the same stream after it.
      at::Tensor dst = acc.empty_pinned(t.sizes(), t.scalar_type());
      dst.copy_(t, /*non_blocking=*/acc.is_pinned(dst));
      t = dst;
    }
    saved[i] = t;
  }
  for (auto& [where, idx] : packed) {
    const bool host_buffer = where == "cpu";
    const c10::Device device = host_buffer ? c10::Device(at::kCPU) : saved[idx[0]].device();
    const bool pin = host_buffer && s.cpu_checkpointing && acc.pin_memory_supported();
    std::vector<at::Tensor> group;
    for (size_t i : idx) group.push_back(saved[i]);
    std::vector<at::Tensor> stored =
        CheckpointState::instance().contiguous_buffer(device, pin)->store(group);
    for (size_t k = 0; k < idx.size(); ++k) saved[idx[k]] = stored[k];
  }
  for (size_t i = 0; i < saved.size(); ++i) {
    bytes += static_cast<int64_t>(saved[i].nbytes());
    if (s.cpu_checkpointing && moves_input(s, inputs[i]))
      host += static_cast<int64_t>(saved[i].nbytes());
  }
  seg.account(bytes, host);
  return saved;
}

// Inverse of save_inputs: the tensors fn saw (shape and device), as fresh leaves that record
// gradients when the originals did.
variable_list restore_inputs(const Segment& seg, const variable_list& saved) {
  variable_list out(saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    at::Tensor t = saved[i];
    if (t.device() != seg.device[i]) t = t.to(seg.device[i], /*non_blocking=*/t.is_pinned());
    if (t.sizes() != at::IntArrayRef(seg.sizes[i])) t = t.view(seg.sizes[i]);
    t = t.detach();
    if (seg.requires_grad[i]) t.requires_grad_(true);
    out[i] = t;
  }
  return out;
}

std::vector<at::Tensor> user_inputs(const Segment& seg, const variable_list& defined) {
  std::vector<at::Tensor> in(seg.input_slot.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (seg.input_slot[i] >= 0) in[i] = defined[static_cast<size_t>(seg.input_slot[i])];
  }
  return in;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `inputs`: the defined user inputs, then (when none of them requires grad) a dummy leaf that
  // does, so the segment's parameters still receive gradients.
  static variable_list forward(AutogradContext* ctx, const c10::intrusive_ptr<Segment>& seg,
                               at::TensorList inputs) {
    Segment& sg = *seg;
    const bool profile = sg.settings.profile;
    if (sg.settings.synchronize_checkpoint_boundary) CheckpointState::instance().synchronize();
    ScopedTimer timer(profile, kForwardTimer);
    CheckpointState::instance().count_forward();
    at::TensorList real_inputs = inputs.slice(0, sg.num_defined);
    sg.rng = RngState::capture();
    std::vector<at::Tensor> outputs = sg.fn(user_inputs(sg, real_inputs.vec()));

    ctx->save_for_backward(save_inputs(sg, real_inputs));
    ctx->saved_data["segment"] = at::IValue::make_capsule(seg);
    // Undefined outputs cannot pass through autograd's bookkeeping: hand back the defined ones
    // only.
    variable_list defined;
    for (const auto& out : outputs) {
      sg.output_slot.push_back(out.defined() ? static_cast<int>(defined.size()) : -1);
      if (out.defined()) defined.push_back(out);
    }
    ctx->set_materialize_grads(false);
    return defined;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    DS_CHECK(torch::autograd::Engine::get_default_engine().is_checkpoint_valid(),
             "deepspeed::checkpointing: a checkpointed segment cannot be differentiated by "
             "torch::autograd::grad(); use backward() (the recomputation accumulates into .grad)");
    auto seg = c10::static_intrusive_pointer_cast<Segment>(ctx->saved_data["segment"].toCapsule());
    Segment& sg = *seg;
    const bool profile = sg.settings.profile;
    if (sg.settings.synchronize_checkpoint_boundary) CheckpointState::instance().synchronize();
    variable_list inputs = restore_inputs(sg, ctx->get_saved_variables());

    std::vector<at::Tensor> outputs;
    {
      ScopedTimer timer(profile, kRecomputeTimer);
      CheckpointState::instance().count_recompute();
      // Replay the forward's random draws, then give the rest of the program the stream it had.
      RngState now = RngState::capture();
      sg.rng.restore();
      try {
        at::AutoGradMode grad_on(true);
        outputs = sg.fn(user_inputs(sg, inputs));
      } catch (...) {
        now.restore();
        throw;
      }
      now.restore();
    }
    DS_CHECK(outputs.size() == sg.output_slot.size(),
             "deepspeed::checkpointing: the segment returned ", outputs.size(),
             " tensors when recomputed but ", sg.output_slot.size(),
             " in forward; a checkpointed function must be deterministic in its outputs");

    variable_list roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int slot = sg.output_slot[i];
      if (slot < 0) continue;
      const at::Tensor& g = grad_outputs[static_cast<size_t>(slot)];
      if (g.defined() && outputs[i].defined() && outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        grads.push_back(g);
      }
    }
    if (!roots.empty()) {
      ScopedTimer timer(profile, kBackwardTimer);
      torch::autograd::backward(roots, grads);
    }

    variable_list result;
    result.reserve(1 + inputs.size() + 1);
    result.emplace_back();  // the Segment argument
    for (const auto& in : inputs) result.push_back(in.requires_grad() ? in.grad() : at::Tensor());
    result.emplace_back();  // the dummy leaf, when there is one (autograd drops a surplus undefined
                            // gradient)
    // Saved tensors are dropped by autograd when this returns (unless the graph is retained).
    sg.release_account();
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint(const SegmentFn& fn, const std::vector<at::Tensor>& inputs) {
  DS_CHECK(static_cast<bool>(fn),
           "deepspeed::checkpointing::checkpoint: the segment function is empty");
  // Without a graph to build there is nothing to recompute later.
  if (!at::GradMode::is_enabled()) return fn(inputs);

  auto seg = c10::make_intrusive<Segment>();
  seg->fn = fn;
  seg->settings = CheckpointState::instance().settings();
  variable_list args;
  bool any_requires_grad = false;
  for (const auto& in : inputs) {
    seg->input_slot.push_back(in.defined() ? static_cast<int>(args.size()) : -1);
    if (!in.defined()) continue;
    args.push_back(in);
    any_requires_grad = any_requires_grad || in.requires_grad();
  }
  seg->num_defined = args.size();
  if (!any_requires_grad) args.push_back(at::empty({0}).requires_grad_(true));

  variable_list defined = CheckpointFunction::apply(seg, at::TensorList(args));
  std::vector<at::Tensor> outputs(seg->output_slot.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (seg->output_slot[i] >= 0) outputs[i] = defined[static_cast<size_t>(seg->output_slot[i])];
  }
  return outputs;
}

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn,
                      const at::Tensor& input) {
  DS_CHECK(static_cast<bool>(fn),
           "deepspeed::checkpointing::checkpoint: the segment function is empty");
  SegmentFn core = [fn](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{fn(in[0])};
  };
  return checkpoint(core, std::vector<at::Tensor>{input}).at(0);
}

}  // namespace deepspeed::checkpointing
