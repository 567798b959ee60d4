// 16-bit master weights at ZeRO stages 1-3: bf16.bf16_master_weights_and_grads and fp16.fp16_master_weights_and_grads.
// The masters are the model's own 16-bit partition (with offload_optimizer "cpu", a 16-bit host copy), gradients
// 16-bit too, the optimizer states bf16 (bf16_optimizer_states; required for bf16 without offload) or fp32 (fp16
// masters always run with offload and fp32 states, as DeepSpeed's), each update computed in fp32 and rounded back.
//
// MastersAreThe16BitWeights: a probe whose gradient is the same constant on every rank and step, -t with
// t = 15/16 of half the 16-bit spacing in [1, 2) (2^-7 for bf16, 2^-10 for fp16). SGD at lr 1 adds t to each weight
// v in [1, 2) per step: a 16-bit master rounds v + t back to v every step, so after 4 steps the weights are still v;
// an fp32 master accumulates 4t, which rounds to v + 2 spacings. Averaging equal gradients over ranks is exact, and
// so is fp16's static loss scale (a power of two). The probe is long enough (2^22 + 48 elements) that a rank's
// partition spans several of the step's 2^20-element fp32 chunks even at 4 ranks.
//
// AdamAgainstAReference: Adam on 16-bit masters against the same update written here in fp32 with the weights (and
// bf16 states) rounded to 16 bits after each step. Our kernel orders the fp32 arithmetic differently, so a value
// lying near a rounding boundary may round the other way: a weight by one spacing per step; a bf16 state by one
// spacing (2^-8 to 2^-7 relative), which moves the next update by at most about lr x 2^-7 = 2^-15, far below the
// weights' spacing (2^-11 for bf16 at |w| < 2^-3; fp16 keeps fp32 states). So the weights agree within one spacing
// per step. Holding fp32 states where bf16 ones are asked would pass that bound, so the saved states must also be
// bf16 values (they are saved as fp32, exactly) at half the bytes; and a resumed run must equal the uninterrupted
// one.
//
// NvmeSwapsSixteenBitMasters: offload_optimizer "nvme" keeps the 16-bit masters (and bf16 states) in its swap files
// in their own dtype and steps them as offload "cpu" does: the same weights, saved masters and moments bit for bit
// (the same fp32 arithmetic per element, on pieces of the partition instead of 2^20-element chunks), a resumed run
// equal to the uninterrupted one, and a buffer pool of the 16-bit bytes (an fp32-masters run beside it checks the
// formula: 16-bit tensors swapped as fp32 would fail it).
//
// Fp16MastersSkipAnOverflowedStep: with fp16 masters a gradient that overflows under the loss scale skips the step
// on every rank (the masters and the weights unchanged, the scale halved), and the run ends where one without that
// step ends.
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
  // The loss in fp32: an fp16 sum times fp16's loss scale would overflow (the gradient would not).
  at::Tensor forward(const at::Tensor& c) { return (w.to(at::kFloat) * c).sum(); }
};
TORCH_MODULE(Probe);

// How the 16-bit masters run: the model's dtype, where they live and the states' dtype.
struct Variant {
  bool masters16 = true;    // bf16_master_weights_and_grads / fp16_master_weights_and_grads
  bool offload = false;     // offload_optimizer "cpu": 16-bit host masters and gradients
  bool bf16_states = true;  // bf16_optimizer_states (required for bf16 without offload)
  at::ScalarType dtype = at::kBFloat16;
  std::string name(int stage) const {
    const std::string model = dtype == at::kHalf ? "fp16" : "bf16";
    if (!masters16) return "stage " + std::to_string(stage) + ", " + model + " model, fp32 masters";
    return "stage " + std::to_string(stage) + ", " + model + " masters" + (offload ? ", offload" : "") +
           (bf16_states ? ", bf16 states" : ", fp32 states");
  }
};
const Variant kVariants[] = {{true, false, true}, {true, true, true}, {true, true, false},
                             {true, true, false, at::kHalf}};

std::string config_json(int stage, const std::string& optimizer, const Variant& v) {
  std::string json = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "steps_per_print": 1000, "optimizer": )" + optimizer +
                     R"(, "zero_optimization": {"stage": )" + std::to_string(stage) +
                     R"(, "reduce_bucket_size": 300000)";
  if (v.offload) json += R"(, "offload_optimizer": {"device": "cpu"})";
  // Stage 3: the probe is not kept whole, so its gradients are reduced from the hooks and its weights gathered and
  // released like any unit's.
  if (stage == 3) json += R"(, "stage3_param_persistence_threshold": 0)";
  if (v.dtype == at::kHalf) {
    // A static loss scale: a power of two, so scaling and unscaling are exact.
    json += R"(}, "fp16": {"enabled": true, "loss_scale": 1024)";
    if (v.masters16) json += R"(, "fp16_master_weights_and_grads": true)";
    return json + "}}";
  }
  json += R"(}, "bf16": {"enabled": true)";
  if (v.masters16) json += R"(, "bf16_master_weights_and_grads": true)";
  if (v.bf16_states) json += R"(, "bf16_optimizer_states": true)";
  return json + "}}";
}

// The probe's weights as fp32 on the host (gathered at stage 3, where each rank holds a partition).
at::Tensor weights_of(const Probe& model, int stage) {
  deepspeed::zero::GatheredParameters whole(*model, /*modifier_rank=*/-1, /*enabled=*/stage == 3);
  return model->w.detach().to(at::kCPU, at::kFloat);
}

bool is_valued_in(const at::Tensor& t, at::ScalarType dtype) { return at::equal(t, t.to(dtype).to(at::kFloat)); }

// The spacing of `dtype` in [2^e, 2^(e+1)).
double spacing_at(at::ScalarType dtype, int e) { return std::ldexp(1.0, e - (dtype == at::kHalf ? 10 : 7)); }

constexpr int64_t kLong = (int64_t{1} << 22) + 48;
constexpr const char* kSgd = R"({"type": "SGD", "params": {"lr": 1.0}})";

TEST(SixteenBitMasters, MastersAreThe16BitWeights) {
  ensure_comm();
  const at::Tensor v = 1.0 + at::arange(kLong, at::kDouble).remainder(4) / 64.0;
  const Variant fp16{true, true, false, at::kHalf};
  for (int stage : {1, 2, 3}) {
    for (const Variant& variant : {kVariants[0], kVariants[1], Variant{false, false, false}, fp16,
                                   Variant{false, true, false, at::kHalf}}) {
      const std::string name = variant.name(stage);
      const double spacing = spacing_at(variant.dtype, 0), t = 15.0 / 16.0 * spacing / 2;
      Probe model(v.to(at::kFloat));
      auto engine =
          deepspeed::initialize(model, deepspeed::Config::from_string(config_json(stage, kSgd, variant)));
      const at::Tensor c = at::full({kLong}, -t, at::kFloat).to(engine.device());
      for (int step = 0; step < 4; ++step) {
        engine.backward(engine.forward(c));
        engine.step();
      }
      const at::Tensor got = weights_of(model, stage);
      const at::Tensor want = (variant.masters16 ? v : v + 2 * spacing).to(at::kFloat);
      EXPECT_TRUE(at::equal(got, want)) << name << ": max difference " << (got - want).abs().max().item<double>();
      const auto bytes = engine.model_state_bytes();
      if (variant.masters16 && !variant.offload) {
        EXPECT_EQ(bytes.master_weights, 0) << name << ": the masters are views of the 16-bit weights";
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
    w = wf.to(w.scalar_type());
    m = mf.to(m.scalar_type());
    v = vf.to(v.scalar_type());
  }
};

constexpr int64_t kShort = 4096 + 40;
constexpr double kLr = 0.00390625;
constexpr const char* kAdamW =
    R"({"type": "AdamW", "params": {"lr": 0.00390625, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}})";

at::Tensor initial_weights() { return (at::arange(kShort, at::kFloat).remainder(97) - 48) / 512.0; }
// Step s's gradient, the same on every rank: varied signs and magnitudes, exact in bf16 (and so in fp16, whose
// significand is longer, at these magnitudes).
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

TEST(SixteenBitMasters, AdamAgainstAReference) {
  ensure_comm();
  const int steps = 5;
  for (int stage : {1, 2, 3}) {
    for (const Variant& variant : kVariants) {
      const std::string name = variant.name(stage);
      const at::ScalarType states = variant.bf16_states ? at::kBFloat16 : at::kFloat;
      ReferenceAdam ref{initial_weights().to(variant.dtype), at::zeros({kShort}, states), at::zeros({kShort}, states),
                        kLr, 0.9, 0.999, 1e-8, 0.01};
      for (int s = 0; s < steps; ++s) ref.update(gradient(s));

      Probe model(initial_weights());
      auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(stage, kAdamW, variant)));
      train(engine, 0, steps);
      const at::Tensor got = weights_of(model, stage);
      const at::Tensor want = ref.w.to(at::kFloat);
      // One spacing per step at the largest weight's magnitude (|w| < 2^-3: bf16 2^-11, fp16 2^-14).
      ASSERT_LT(want.abs().max().item<double>(), 0.125) << name;
      const double bound = steps * spacing_at(variant.dtype, -4);
      EXPECT_LE((got - want).abs().max().item<double>(), bound) << name;
      // The weights moved by many spacings: the comparison is not between two unchanged tensors.
      EXPECT_GT((want - initial_weights()).abs().max().item<double>(), 4 * bound) << name;

      // States: bf16 values at half the bytes of fp32 states (Adam: 2 states per element of the partition), or
      // fp32 ones at the fp32 run's bytes.
      const Variant fp32_masters{false, variant.offload, false, variant.dtype};
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
        // The masters always hold 16-bit values; the moments when they are bf16.
        if (k == 0 || variant.bf16_states) {
          const at::ScalarType held = k == 0 ? variant.dtype : at::kBFloat16;
          EXPECT_TRUE(is_valued_in(saved[k], held)) << name << ": every saved value is a 16-bit value (tensor " << k
                                                    << ")";
        }
      }
      // fp32 moments are not all bf16 values: the check above tells the two apart.
      train(fp32_run, 0, 2);
      ds_test::SharedTempDir fp32_dir("ds_bf16_masters");
      fp32_run.save_checkpoint(fp32_dir.path(), std::string("t"));
      EXPECT_FALSE(is_valued_in(saved_optimizer_tensors(fp32_dir.path())[2], at::kBFloat16)) << name;

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

// offload_optimizer.overlap_step with 16-bit masters or gradients: the update of step s runs while step s + 1's
// forward and backward run, so after step s the weights are those of the synchronous run after step s - 1. The
// probe's gradients do not depend on its weights, so the updates themselves are the synchronous run's, bit for bit.
// A run that stepped synchronously (the overlap silently off) would be one step ahead; one that dropped an update or
// took another would drift from the synchronous weights. Variants: bf16 masters (fp32 and bf16 states), fp16
// masters, fp32 masters with bf16 gradients (data_types.grad_accum_dtype), and fp32 masters of a bf16 model with
// fp32 gradients, the one whose overlapped kernel writes the bf16 copies on an accelerator (into pinned host
// buffers here, which publish() copies up without blocking; the synchronous run's are pageable).
TEST(SixteenBitMasters, AnOverlappedStepTakesTheSynchronousUpdatesOneStepLate) {
  ensure_comm();
  struct Run {
    Variant variant;
    bool accum16;  // data_types.grad_accum_dtype bf16 with fp32 masters
  };
  const Run runs[] = {{kVariants[1], false}, {kVariants[2], false}, {kVariants[3], false},
                      {Variant{false, true, false}, true}, {Variant{false, true, false}, false}};
  for (int stage : {1, 2, 3}) {
    for (const Run& run : runs) {
      const std::string name = run.variant.name(stage) + (run.accum16 ? ", bf16 gradients" : "") + ", overlapped";
      std::string json = config_json(stage, kAdamW, run.variant);
      if (run.accum16) json.insert(json.rfind('}'), R"(, "data_types": {"grad_accum_dtype": "bf16"})");
      const std::string cpu = R"("offload_optimizer": {"device": "cpu"})";
      ASSERT_NE(json.find(cpu), std::string::npos) << json;
      std::string overlapped = json;
      overlapped.replace(overlapped.find(cpu), cpu.size(),
                         R"("offload_optimizer": {"device": "cpu", "overlap_step": true, "pin_memory": true})");
      Probe sync_model(initial_weights()), overlap_model(initial_weights());
      auto sync = deepspeed::initialize(sync_model, deepspeed::Config::from_string(json));
      auto overlap = deepspeed::initialize(overlap_model, deepspeed::Config::from_string(overlapped));
      at::Tensor previous = weights_of(sync_model, stage);
      for (int s = 0; s < 4; ++s) {
        train(sync, s, s + 1);
        train(overlap, s, s + 1);
        const at::Tensor now = weights_of(sync_model, stage);
        EXPECT_TRUE(at::equal(weights_of(overlap_model, stage), previous))
            << name << ": after step " << s << " the weights are not the synchronous run's after step " << s - 1;
        EXPECT_FALSE(at::equal(now, previous)) << name << ": step " << s << " did not train";
        previous = now;
      }
    }
  }
}

TEST(SixteenBitMasters, NvmeSwapsSixteenBitMasters) {
  ensure_comm();
  // A partition of about 25576 / world elements (more than one sub-group of 4096 at 1-4 ranks, so the pool is one set
  // of 4096 elements per tensor whatever the dtype: 4096 is a multiple of the 2048-element alignment of 16-bit
  // tensors and of fp32's 1024), whose last piece is a partial one.
  constexpr int64_t n = 25576;
  const at::Tensor initial = (at::arange(n, at::kFloat).remainder(97) - 48) / 512.0;
  auto grad_of = [](int s) {
    return (at::sin(at::arange(n, at::kFloat) * 0.37 + s) * 3.0).to(at::kBFloat16).to(at::kFloat);
  };
  auto run = [&](deepspeed::Engine& engine, int first, int last) {
    for (int s = first; s < last; ++s) {
      engine.backward(engine.forward(grad_of(s).to(engine.device())));
      engine.step();
    }
  };
  // Variants: bf16 masters with fp32 and with bf16 states, fp16 masters (fp32 states), and fp32 masters of a bf16
  // model (the control for the pool's bytes).
  for (const Variant& variant : {kVariants[2], kVariants[1], kVariants[3], Variant{false, true, false}}) {
    for (int stage : {1, 2, 3}) {
      const std::string name = variant.name(stage) + ", nvme";
      ds_test::SharedTempDir swap("ds_nvme_masters");
      const std::string cpu_json = config_json(stage, kAdamW, variant);
      const std::string cpu = R"("offload_optimizer": {"device": "cpu"})";
      ASSERT_NE(cpu_json.find(cpu), std::string::npos) << cpu_json;
      std::string nvme_json = cpu_json;
      nvme_json.replace(nvme_json.find(cpu), cpu.size(),
                        R"("sub_group_size": 4096, "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
                            swap.path() + R"(", "buffer_count": 3})");
      nvme_json.insert(nvme_json.rfind('}'), R"(, "aio": {"block_size": 4096})");
      const int steps = 4;
      Probe cpu_model(initial), nvme_model(initial);
      auto on_cpu = deepspeed::initialize(cpu_model, deepspeed::Config::from_string(cpu_json));
      auto on_nvme = deepspeed::initialize(nvme_model, deepspeed::Config::from_string(nvme_json));
      run(on_cpu, 0, steps);
      run(on_nvme, 0, steps);
      const at::Tensor want = weights_of(cpu_model, stage);
      EXPECT_TRUE(at::equal(weights_of(nvme_model, stage), want)) << name << ": the weights differ from offload cpu's";
      EXPECT_GT((want - initial).abs().max().item<double>(), 0.01) << name << ": the run did not train";

      const int64_t master_bytes = variant.masters16 ? 2 : 4, state_bytes = variant.bf16_states ? 2 : 4;
      EXPECT_EQ(on_nvme.model_state_bytes().optimizer_states, 4096 * (master_bytes + 2 * state_bytes))
          << name << ": the swap pool";

      ds_test::SharedTempDir cpu_dir("ds_nvme_masters"), nvme_dir("ds_nvme_masters");
      on_cpu.save_checkpoint(cpu_dir.path(), std::string("t"));
      on_nvme.save_checkpoint(nvme_dir.path(), std::string("t"));
      const std::vector<at::Tensor> cpu_saved = saved_optimizer_tensors(cpu_dir.path());
      const std::vector<at::Tensor> nvme_saved = saved_optimizer_tensors(nvme_dir.path());
      ASSERT_EQ(cpu_saved.size(), nvme_saved.size()) << name;
      for (size_t k = 0; k < cpu_saved.size(); ++k)
        EXPECT_TRUE(at::equal(nvme_saved[k], cpu_saved[k])) << name << ": saved tensor " << k << " differs";

      // Resumed from step 2 (the swap files written from the checkpoint): the uninterrupted run's weights.
      ds_test::SharedTempDir resume_dir("ds_nvme_masters");
      {
        Probe first(initial);
        auto e = deepspeed::initialize(first, deepspeed::Config::from_string(nvme_json));
        run(e, 0, 2);
        e.save_checkpoint(resume_dir.path());
      }
      Probe second(at::zeros({n}));
      auto resumed = deepspeed::initialize(second, deepspeed::Config::from_string(nvme_json));
      ASSERT_TRUE(resumed.load_checkpoint(resume_dir.path()).has_value()) << name;
      run(resumed, 2, steps);
      EXPECT_TRUE(at::equal(weights_of(second, stage), want)) << name << ": resumed run differs";
    }
  }
}

TEST(SixteenBitMasters, Fp16MastersSkipAnOverflowedStep) {
  ensure_comm();
  const int poisoned = deepspeed::comm::get_world_size() - 1;
  const std::string sgd = R"({"type": "SGD", "params": {"lr": 0.00390625}})";
  for (int stage : {1, 2, 3}) {
    const std::string name = "stage " + std::to_string(stage);
    std::string json = config_json(stage, sgd, Variant{true, true, false, at::kHalf});
    const std::string fixed = R"("loss_scale": 1024)";
    ASSERT_NE(json.find(fixed), std::string::npos);
    json.replace(json.find(fixed), fixed.size(), R"("initial_scale_power": 10, "hysteresis": 1)");
    Probe model(initial_weights());
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
    ASSERT_EQ(engine.loss_scale(), 1024.0) << name;
    // The same run without the overflowed step: SGD's update is the unscaled gradient times lr, and both scales are
    // powers of two, so it ends bit for bit where the skipping run ends, unless the skipped step left a trace in
    // the masters (which the next step would publish).
    Probe clean_model(initial_weights());
    auto clean = deepspeed::initialize(clean_model, deepspeed::Config::from_string(json));
    train(clean, 0, 1);
    train(clean, 2, 3);
    for (int s = 0; s < 3; ++s) {
      at::Tensor c = gradient(s);
      // 60000 x 1024 is past fp16's largest value: that rank's gradient overflows.
      if (s == 1 && deepspeed::comm::get_rank() == poisoned) c[5] = 60000.0;
      const at::Tensor before = weights_of(model, stage);
      engine.backward(engine.forward(c.to(engine.device())));
      engine.step();
      const at::Tensor after = weights_of(model, stage);
      if (s == 1) {
        EXPECT_TRUE(at::equal(after, before)) << name << ": the overflowed step moved the weights";
        EXPECT_EQ(engine.skipped_steps(), 1) << name;
        EXPECT_EQ(engine.loss_scale(), 512.0) << name;
      } else {
        EXPECT_FALSE(at::equal(after, before)) << name << ": step " << s << " should train";
      }
    }
    EXPECT_TRUE(at::equal(weights_of(model, stage), weights_of(clean_model, stage)))
        << name << ": the run that skipped a step is not the run without it";
  }
}

}  // namespace
