// bf16.bf16_master_weights_and_grads at ZeRO stages 1-3: the masters are the model's own bf16 partition (with
// offload_optimizer "cpu", a bf16 host copy), gradients bf16 too, the optimizer states bf16 (bf16_optimizer_states;
// required without offload) or fp32, each update computed in fp32 and rounded back.
//
// MastersAreTheBf16Weights: a probe whose gradient is the same constant on every rank and step, -t with
// t = 15/16 of half the bf16 spacing in [1, 2). SGD at lr 1 adds t to each weight v in [1, 2) per step: a bf16
// master rounds v + t back to v every step, so after 4 steps the weights are still v; an fp32 master accumulates 4t,
// which rounds to v + 2 spacings. Averaging equal gradients over ranks is exact. The probe is long enough (2^22 + 48
// elements) that a rank's partition spans several of the step's 2^20-element fp32 chunks even at 4 ranks.
//
// AdamAgainstAReference: Adam on bf16 masters against the same update written here in fp32 with the weights (and
// bf16 states) rounded to bf16 after each step. Our kernel orders the fp32 arithmetic differently, so a value lying
// near a bf16 rounding boundary may round the other way: a weight by one bf16 spacing per step; a bf16 state by one
// spacing (2^-8 to 2^-7 relative), which moves the next update by at most about lr x 2^-7 = 2^-15, far below the
// weights' spacing (2^-11 at |w| < 2^-3). So the weights agree within one spacing per step. Holding fp32 states
// where bf16 ones are asked would pass that bound, so the saved states must also be bf16 values (they are saved as
// fp32, exactly) at half the bytes; and a resumed run must equal the uninterrupted one.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <cmath>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "shared_temp_dir.h"

namespace ckpt = deepspeed::checkpoint;

namespace {

void ensure_comm() {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
}

struct ProbeImpl : torch::nn::Module {
  at::Tensor w;
  explicit ProbeImpl(const at::Tensor& initial) { w = register_parameter("w", initial.clone()); }
  at::Tensor forward(const at::Tensor& c) { return (w * c).sum(); }
};
TORCH_MODULE(Probe);

// How the bf16 masters run: where they live and the states' dtype.
struct Variant {
  bool bf16_masters = true;
  bool offload = false;     // offload_optimizer "cpu": bf16 host masters and gradients
  bool bf16_states = true;  // bf16_optimizer_states (required without offload)
  std::string name(int stage) const {
    if (!bf16_masters) return "stage " + std::to_string(stage) + ", fp32 masters";
    return "stage " + std::to_string(stage) + ", bf16 masters" + (offload ? ", offload" : "") +
           (bf16_states ? ", bf16 states" : ", fp32 states");
  }
};
const Variant kBf16Variants[] = {{true, false, true}, {true, true, true}, {true, true, false}};

std::string config_json(int stage, const std::string& optimizer, const Variant& v) {
  std::string json = R"({"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1000, "optimizer": )" + optimizer +
                     R"(, "zero_optimization": {"stage": )" + std::to_string(stage) +
                     R"(, "reduce_bucket_size": 300000)";
  if (v.offload) json += R"(, "offload_optimizer": {"device": "cpu"})";
  // Stage 3: the probe is not kept whole, so its gradients are reduced from the hooks and its weights gathered and
  // released like any unit's.
  if (stage == 3) json += R"(, "stage3_param_persistence_threshold": 0)";
  json += R"(}, "bf16": {"enabled": true)";
  if (v.bf16_masters) json += R"(, "bf16_master_weights_and_grads": true)";
  if (v.bf16_states) json += R"(, "bf16_optimizer_states": true)";
  return json + "}}";
}

// The probe's weights as fp32 on the host (gathered at stage 3, where each rank holds a partition).
at::Tensor weights_of(const Probe& model, int stage) {
  deepspeed::zero::GatheredParameters whole(*model, /*modifier_rank=*/-1, /*enabled=*/stage == 3);
  return model->w.detach().to(at::kCPU, at::kFloat);
}

bool is_bf16_valued(const at::Tensor& t) { return at::equal(t, t.to(at::kBFloat16).to(at::kFloat)); }

constexpr int64_t kLong = (int64_t{1} << 22) + 48;
constexpr const char* kSgd = R"({"type": "SGD", "params": {"lr": 1.0}})";

TEST(Bf16Masters, MastersAreTheBf16Weights) {
  ensure_comm();
  const double spacing = std::ldexp(1.0, -7), t = 15.0 / 16.0 * spacing / 2;
  const at::Tensor v = 1.0 + at::arange(kLong, at::kDouble).remainder(4) / 64.0;
  for (int stage : {1, 2, 3}) {
    for (const Variant& variant : {kBf16Variants[0], kBf16Variants[1], Variant{false, false, false}}) {
      const std::string name = variant.name(stage);
      Probe model(v.to(at::kFloat));
      auto engine =
          deepspeed::initialize(model, deepspeed::Config::from_string(config_json(stage, kSgd, variant)));
      const at::Tensor c = at::full({kLong}, -t, at::kFloat).to(engine.device());
      for (int step = 0; step < 4; ++step) {
        engine.backward(engine.forward(c));
        engine.step();
      }
      const at::Tensor got = weights_of(model, stage);
      const at::Tensor want = (variant.bf16_masters ? v : v + 2 * spacing).to(at::kFloat);
      EXPECT_TRUE(at::equal(got, want)) << name << ": max difference " << (got - want).abs().max().item<double>();
      const auto bytes = engine.model_state_bytes();
      if (variant.bf16_masters && !variant.offload) {
        EXPECT_EQ(bytes.master_weights, 0) << name << ": the masters are views of the bf16 weights";
      } else {
        EXPECT_GT(bytes.master_weights, 0) << name;
      }
    }
  }
}

// The update AdamW makes, in fp32 with the weights (and, where DeepSpeed's bf16 optimizer states hold them, the
// moments) stored in bf16, on a single process.
struct ReferenceAdam {
  at::Tensor w, m, v;
  double lr, beta1, beta2, eps, decay;
  int step = 0;
  void update(const at::Tensor& grad) {
    ++step;
    const at::Tensor g = grad.to(at::kFloat);
    at::Tensor mf = m.to(at::kFloat) * beta1 + (1 - beta1) * g;
    at::Tensor vf = v.to(at::kFloat) * beta2 + (1 - beta2) * g * g;
    const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
    at::Tensor wf = w.to(at::kFloat) * (1 - lr * decay) - lr / bc1 * mf / (vf.sqrt() / std::sqrt(bc2) + eps);
    w = wf.to(at::kBFloat16);
    m = mf.to(m.scalar_type());
    v = vf.to(v.scalar_type());
  }
};

constexpr int64_t kShort = 4096 + 40;
constexpr double kLr = 0.00390625;
constexpr const char* kAdamW =
    R"({"type": "AdamW", "params": {"lr": 0.00390625, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}})";

at::Tensor initial_weights() { return (at::arange(kShort, at::kFloat).remainder(97) - 48) / 512.0; }
// Step s's gradient, the same on every rank: varied signs and magnitudes, exact in bf16.
at::Tensor gradient(int s) {
  return (at::sin(at::arange(kShort, at::kFloat) * 0.37 + s) * 3.0).to(at::kBFloat16).to(at::kFloat);
}

void train(deepspeed::Engine& engine, int first, int last) {
  for (int s = first; s < last; ++s) {
    engine.backward(engine.forward(gradient(s).to(engine.device())));
    engine.step();
  }
}

// This rank's saved masters and Adam moments (fp32 in the file) of a checkpoint tagged "t".
std::vector<at::Tensor> saved_optimizer_tensors(const std::string& dir) {
  auto saved = ckpt::load_state(ckpt::optim_states_path(dir, "t", deepspeed::comm::get_rank()));
  const auto state = saved.at("optimizer_state_dict").toGenericDict().at("state").toList().get(0).toGenericDict();
  return {saved.at(ckpt::kFp32FlatGroupsKey).toList().get(0).toTensor(), state.at("exp_avg").toTensor(),
          state.at("exp_avg_sq").toTensor()};
}

TEST(Bf16Masters, AdamAgainstAReference) {
  ensure_comm();
  const int steps = 5;
  for (int stage : {1, 2, 3}) {
    for (const Variant& variant : kBf16Variants) {
      const std::string name = variant.name(stage);
      const at::ScalarType states = variant.bf16_states ? at::kBFloat16 : at::kFloat;
      ReferenceAdam ref{initial_weights().to(at::kBFloat16), at::zeros({kShort}, states), at::zeros({kShort}, states),
                        kLr, 0.9, 0.999, 1e-8, 0.01};
      for (int s = 0; s < steps; ++s) ref.update(gradient(s));

      Probe model(initial_weights());
      auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(stage, kAdamW, variant)));
      train(engine, 0, steps);
      const at::Tensor got = weights_of(model, stage);
      const at::Tensor want = ref.w.to(at::kFloat);
      // One bf16 spacing per step at the largest weight's magnitude (|w| < 2^-3: spacing 2^-11).
      ASSERT_LT(want.abs().max().item<double>(), 0.125) << name;
      const double bound = steps * std::ldexp(1.0, -11);
      EXPECT_LE((got - want).abs().max().item<double>(), bound) << name;
      // The weights moved by many spacings: the comparison is not between two unchanged tensors.
      EXPECT_GT((want - initial_weights()).abs().max().item<double>(), 4 * bound) << name;

      // States: bf16 values at half the bytes of fp32 states (Adam: 2 states per element of the partition), or
      // fp32 ones at the fp32 run's bytes.
      const Variant fp32_masters{false, variant.offload, false};
      Probe fp32_model(initial_weights());
      auto fp32_run =
          deepspeed::initialize(fp32_model, deepspeed::Config::from_string(config_json(stage, kAdamW, fp32_masters)));
      EXPECT_EQ((variant.bf16_states ? 2 : 1) * engine.model_state_bytes().optimizer_states,
                fp32_run.model_state_bytes().optimizer_states)
          << name;
      ds_test::SharedTempDir dir("ds_bf16_masters");
      engine.save_checkpoint(dir.path(), std::string("t"));
      const std::vector<at::Tensor> saved = saved_optimizer_tensors(dir.path());
      for (size_t k = 0; k < saved.size(); ++k) {
        EXPECT_EQ(saved[k].scalar_type(), at::kFloat) << name << ": saved as fp32, as any run's";
        EXPECT_GT(saved[k].numel(), 0) << name;
        // The masters always hold bf16 values; the moments when they are bf16.
        if (k == 0 || variant.bf16_states) {
          EXPECT_TRUE(is_bf16_valued(saved[k])) << name << ": every saved value is a bf16 value (tensor " << k << ")";
        }
      }
      // fp32 moments are not all bf16 values: the check above tells the two apart.
      train(fp32_run, 0, 2);
      ds_test::SharedTempDir fp32_dir("ds_bf16_masters");
      fp32_run.save_checkpoint(fp32_dir.path(), std::string("t"));
      EXPECT_FALSE(is_bf16_valued(saved_optimizer_tensors(fp32_dir.path())[2])) << name;

      // Resuming: 2 steps, save, a fresh engine loads and takes the other 3: the weights equal the uninterrupted
      // run's.
      ds_test::SharedTempDir resume_dir("ds_bf16_masters");
      {
        Probe first(initial_weights());
        auto e = deepspeed::initialize(first, deepspeed::Config::from_string(config_json(stage, kAdamW, variant)));
        train(e, 0, 2);
        e.save_checkpoint(resume_dir.path());
      }
      Probe second(at::zeros({kShort}));
      auto resumed = deepspeed::initialize(second, deepspeed::Config::from_string(config_json(stage, kAdamW, variant)));
      ASSERT_TRUE(resumed.load_checkpoint(resume_dir.path()).has_value()) << name;
      train(resumed, 2, steps);
      EXPECT_TRUE(at::equal(weights_of(second, stage), got)) << name << ": resumed run differs";
    }
  }
}

}  // namespace
