// ZeRO-Infinity's optimizer step (offload_optimizer "nvme"): masters and optimizer states live in swap files and
// stream through a pool of buffers a sub-group at a time (optimizer_step.h, swap/optimizer_swapper.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "runtime/fp32_operands.h"
#include "runtime/optimizer_step.h"
#include "swap/aio.h"
#include "swap/optimizer_swapper.h"
#include "zero/make_stage.h"
#include "zero/stage_features.h"

namespace deepspeed::runtime {
namespace {

zero::SlicedMasters& sliced_masters(zero::Stage& stage) {
  zero::SlicedMasters* slices = zero::feature<zero::SlicedMasters>(stage);
  DS_ASSERT(slices != nullptr, "every ZeRO stage streams its masters in slices");
  return *slices;
}

class NvmeStep : public OptimizerStep {
 public:
  NvmeStep(const OptimizerStepParts& parts, EngineOptimizer& optimizer, std::unique_ptr<swap::OptimizerSwapper> swapper)
      : p_(parts), optimizer_(optimizer), slices_(sliced_masters(*parts.stage)), swapper_(std::move(swapper)) {}

  void run(std::vector<at::Tensor> grads, double coef) override {
    const bool low_precision = scale_gradients(*p_.stage, grads, coef);
    // 16-bit gradients, masters or states step in fp32 chunks of 2^20 elements, as the resident chunked step does, so
    // the fp32 buffers stay 4 MiB each whatever the pieces' size.
    Fp32Operands fp32(std::min(Fp32Operands::kChunk, swapper_->slice_size()), at::TensorOptions().dtype(at::kFloat));
    optimizer_.begin_step();
    swapper_->step([&](size_t g, int64_t offset, const at::Tensor& master, const std::vector<at::Tensor>& states) {
      const int64_t n = master.numel();
      // bf16/fp16 parameters of fp32 masters: the kernel writes them in its pass (DeepSpeed's fused fp16_param copy).
      // 16-bit masters are the parameters' values once rounded: write_slice copies them.
      const bool master16 = master.scalar_type() != at::kFloat;
      const at::Tensor copy = master16 ? at::Tensor() : slices_.copy_back_slice(g, offset, n);
      at::Tensor grad = grads[g].narrow(0, offset, n);
      // The CPU kernel reads host memory: a device's gradients come down one sub-group at a time.
      if (!grad.device().is_cpu()) grad = grad.to(at::kCPU);
      fp32.step_chunks(low_precision ? coef : 1.0, master, grad, states.size() > 0 ? states[0] : at::Tensor(),
                       states.size() > 1 ? states[1] : at::Tensor(), copy,
                       [&](const at::Tensor& m, const at::Tensor& g32, const at::Tensor& first,
                           const at::Tensor& second,
                           const at::Tensor& c) { optimizer_.step_slice(g, m, g32, first, second, c); });
      if (!copy.defined()) slices_.write_slice(g, offset, master);
    });
    p_.stage->publish();
  }

  // One pass over the swap files (the swapper writes the unchanged pieces back). The copies hold this rank's whole
  // partition for the duration of the save or load.
  MasterState checkpoint_state() override {
    MasterState out;
    const size_t num_states = optimizer_.state_names().size();
    for (size_t g = 0; g < p_.groups->size(); ++g) {
      const int64_t n = slices_.initial_master(g).numel();
      out.masters.push_back(at::empty({n}, at::kFloat));
      out.states.emplace_back();
      for (size_t k = 0; k < num_states; ++k) out.states.back().push_back(at::empty({n}, at::kFloat));
    }
    swapper_->step([&](size_t g, int64_t offset, const at::Tensor& master, const std::vector<at::Tensor>& states) {
      out.masters[g].narrow(0, offset, master.numel()).copy_(master);
      for (size_t k = 0; k < num_states; ++k) out.states[g][k].narrow(0, offset, master.numel()).copy_(states[k]);
    });
    return out;
  }

  void commit_checkpoint_state(const MasterState& state) override {
    swapper_->step([&](size_t g, int64_t offset, const at::Tensor& master, const std::vector<at::Tensor>& states) {
      master.copy_(state.masters[g].narrow(0, offset, master.numel()));
      for (size_t k = 0; k < states.size() && k < state.states[g].size(); ++k)
        states[k].copy_(state.states[g][k].narrow(0, offset, master.numel()));
      slices_.write_slice(g, offset, master);  // the parameters follow their masters
    });
  }

  // The masters and states stream through this pool.
  int64_t resident_state_bytes() const override { return swapper_->resident_bytes(); }

 private:
  OptimizerStepParts p_;
  EngineOptimizer& optimizer_;
  zero::SlicedMasters& slices_;
  std::unique_ptr<swap::OptimizerSwapper> swapper_;
};

}  // namespace

std::unique_ptr<OptimizerStep> make_nvme_step(const OptimizerStepParts& parts, const config::OptimizerConfig& cfg,
                                              std::unique_ptr<EngineOptimizer>* optimizer) {
  const Config& config = *parts.config;
  const auto& oo = config.zero.offload_optimizer;
  std::vector<at::Tensor> initial;
  for (size_t g = 0; g < parts.groups->size(); ++g) initial.push_back(sliced_masters(*parts.stage).initial_master(g));
  *optimizer = make_fused_optimizer(cfg, *parts.groups, initial, /*resident_state=*/false);
  swap::OptimizerSwapperOptions so;
  so.dir = oo.nvme_path.value() + "/zero_stage_" + std::to_string(config.zero.stage) + "/optimizer/rank" +
           std::to_string(parts.rank);
  so.num_states = (*optimizer)->num_states();
  // 16-bit masters (and bf16 optimizer states) are swapped as they are: half the bytes on disk and in the pool.
  if (zero::model_dtype_masters(config)) so.master_dtype = config.bf16.enabled ? at::kBFloat16 : at::kHalf;
  if (config.bf16.enabled && config.bf16.bf16_optimizer_states) so.state_dtype = at::kBFloat16;
  so.sub_group_size = config.zero.sub_group_size;
  so.buffer_count = oo.buffer_count;
  so.pipeline = oo.pipeline();
  so.aio = swap::aio_options_from_config(config.aio);
  auto swapper = std::make_unique<swap::OptimizerSwapper>(so, initial);
  return std::make_unique<NvmeStep>(parts, **optimizer, std::move(swapper));
}

}  // namespace deepspeed::runtime
