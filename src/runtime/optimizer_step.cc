// The resident ways to run the optimizer step (optimizer_step.h): in place or in fp32 chunks, and overlapped.
#include "runtime/optimizer_step.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "deepspeed/error.h"
#include "runtime/fp32_operands.h"
#include "runtime/overlapped_step.h"

namespace deepspeed::runtime {

bool scale_gradients(const zero::Stage& stage, std::vector<at::Tensor>& grads, double coef) {
  // Gradients accumulated in the model's bf16/fp16 (data_types.grad_accum_dtype, bf16 masters) reach the fp32 kernels
  // a chunk at a time, converted and scaled there: multiplying them in their own dtype would round every one. With
  // nvme offload: none (stages 1-2), or zero-length ones of the masters' dtype (stage 3).
  const std::vector<at::Tensor>& masters = stage.masters();
  const bool low_precision = !grads.empty() && (grads.front().scalar_type() != at::kFloat ||
                                                (!masters.empty() && masters.front().scalar_type() != at::kFloat));
  if (coef != 1.0 && !low_precision)
    for (auto& g : grads) g.mul_(coef);
  return low_precision;
}

namespace {

// Masters and states in memory: the fused kernel over whole groups, or over fp32 chunks of 16-bit operands.
class ResidentStep : public OptimizerStep {
 public:
  explicit ResidentStep(const OptimizerStepParts& parts) : p_(parts) {}

  void run(std::vector<at::Tensor> grads, double coef) override {
    const bool low_precision = scale_gradients(*p_.stage, grads, coef);
    update(grads, coef, low_precision);
    p_.stage->publish();
  }

  // The update alone, with the gradients as scale_gradients left them: 16-bit ones take the chunked fp32 step, scaled
  // by `coef` as they go; fp32 ones were scaled.
  void update(const std::vector<at::Tensor>& grads, double coef, bool low_precision) {
    DS_ASSERT(p_.optimizer != nullptr, "an optimizer step without an optimizer");
    if (low_precision) {
      step_in_fp32_chunks(grads, coef);
    } else {
      p_.optimizer->step(p_.stage->masters(), grads);
    }
  }

  MasterState checkpoint_state() override {
    MasterState out;
    out.masters = p_.stage->masters();
    if (p_.optimizer)
      for (size_t g = 0; g < out.masters.size(); ++g) out.states.push_back(p_.optimizer->group_state(g));
    if (!out.masters.empty() && out.masters.front().scalar_type() != at::kFloat) {
      // bf16 masters and states (bf16_master_weights_and_grads): saved as fp32, exactly, so the files are those of
      // any other run (DeepSpeed converts on load too); commit_checkpoint_state rounds loaded values back.
      for (auto& m : out.masters) m = m.to(at::kFloat);
      for (auto& states : out.states)
        for (auto& t : states) t = t.to(at::kFloat);
    }
    return out;
  }

  void commit_checkpoint_state(const MasterState& state) override {
    const std::vector<at::Tensor>& live = p_.stage->masters();
    if (live.empty() || live.front().scalar_type() == at::kFloat) return;  // `state` holds the live tensors
    for (size_t g = 0; g < live.size(); ++g) {
      live[g].copy_(state.masters[g]);
      const std::vector<at::Tensor> states = p_.optimizer ? p_.optimizer->group_state(g) : std::vector<at::Tensor>();
      for (size_t k = 0; k < states.size() && k < state.states[g].size(); ++k) states[k].copy_(state.states[g][k]);
    }
  }

  int64_t resident_state_bytes() const override { return p_.optimizer ? p_.optimizer->state_bytes() : 0; }

 private:
  // Each chunk of a group's gradient converted to fp32 and scaled by `coef` in one bounded buffer, then the fused
  // kernel on that slice.
  void step_in_fp32_chunks(const std::vector<at::Tensor>& grads, double coef) {
    const std::vector<at::Tensor>& masters = p_.stage->masters();
    int64_t longest = 0;
    for (const auto& m : masters) longest = std::max(longest, std::min(Fp32Operands::kChunk, m.numel()));
    // One fp32 buffer per operand that is not fp32 itself (the gradient; with 16-bit masters the master and states),
    // taken when first needed.
    Fp32Operands fp32(longest, masters.front().options());
    EngineOptimizer& optimizer = *p_.optimizer;
    optimizer.begin_step();
    for (size_t g = 0; g < masters.size(); ++g) {
      const std::vector<at::Tensor> states = optimizer.group_state(g);
      fp32.step_chunks(coef, masters[g], grads[g], states.size() > 0 ? states[0] : at::Tensor(),
                       states.size() > 1 ? states[1] : at::Tensor(), at::Tensor(),
                       [&](const at::Tensor& m, const at::Tensor& grad, const at::Tensor& first,
                           const at::Tensor& second, const at::Tensor&) {
                         optimizer.step_slice(g, m, grad, first, second);
                       });
    }
  }

  OptimizerStepParts p_;
};

// The resident update on a thread of its own, while the next step's forward and backward run on the parameters as
// they are (one step stale); the next boundary (or anything that reads the masters) lands it. The gradients it reads
// are the stage's host copies, rewritten only after that.
class OverlappedUpdate : public OptimizerStep {
 public:
  explicit OverlappedUpdate(const OptimizerStepParts& parts) : p_(parts), inner_(parts) {}

  void run(std::vector<at::Tensor> grads, double coef) override {
    const bool low_precision = scale_gradients(*p_.stage, grads, coef);
    // On an accelerator the training thread only launches kernels, and a CPU optimizer team on every core would keep
    // preempting it (the GPU then waits for launches): the step leaves it one core. On a CPU both compute.
    const int threads = at::get_num_threads();
    const int worker_threads = p_.on_accelerator ? std::max(1, threads - 1) : 0;
    thread_.launch(
        [this, grads = std::move(grads), coef, low_precision] {
          at::NoGradGuard no_grad;
          inner_.update(grads, coef, low_precision);
        },
        worker_threads);
  }
  bool land() override {
    if (!thread_.pending()) return false;
    thread_.wait();
    p_.stage->publish();
    return true;
  }
  bool pending() const override { return thread_.pending(); }
  MasterState checkpoint_state() override { return inner_.checkpoint_state(); }
  void commit_checkpoint_state(const MasterState& state) override { inner_.commit_checkpoint_state(state); }
  int64_t resident_state_bytes() const override { return inner_.resident_state_bytes(); }

 private:
  OptimizerStepParts p_;
  ResidentStep inner_;
  OverlappedStep thread_;  // last: destroyed (waited for) before what its work reads
};

}  // namespace

std::unique_ptr<OptimizerStep> make_resident_step(const OptimizerStepParts& parts, bool overlapped) {
  if (overlapped) return std::make_unique<OverlappedUpdate>(parts);
  return std::make_unique<ResidentStep>(parts);
}

}  // namespace deepspeed::runtime
