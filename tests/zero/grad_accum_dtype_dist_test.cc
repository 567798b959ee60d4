// data_types.grad_accum_dtype: a bf16 or fp16 model accumulates its gradients over micro-steps in its own dtype when
// the key names it (any stage), in fp32 otherwise. The gradients are chosen so that the two differ exactly, in any
// reduction order and at any rank count: loss = sum(a * c_a) + sum(b * c_b) makes each micro-step's gradient exactly
// its constants (the same on every rank), and over 4 micro-steps they are
//   v, t, t, 0   with v = 1 + k 2^-6 (k = 0..3) and t = 15/16 of half v's spacing in the model's dtype (2^-7 in
//                bf16, 2^-10 in fp16), exact in that dtype.
// In the model's dtype each v + t rounds back to v (t is under half a spacing), so the window's gradient is v; in
// fp32 it is v + 2t, which rounds up to v + one spacing when the fp32 master is rounded into the parameters. SGD at
// lr 1 from zero weights leaves minus the window's mean gradient (v / 4, or (v + 2t) / 4 rounded: the loss divided
// by the 4 micro-steps) in the weights, exact in the model's dtype; averaging over ranks moves neither (equal
// gradients: the sum over n <= 4 ranks is exact, in fp32 and in 16 bits too, where stages 0/1 reduce 16-bit
// gradients: 64v is an integer in 64..67, times 3 at most 201, 8 bits; one rounding of it times 1/n lands back on
// it). The parameters are long enough (2^20 + 64 elements) that at stage 0 the fp32 step runs in two chunks.
// Gradient memory: half of fp32's.
//
// AWireIntoFp16AveragesBeforeRounding: with communication_data_type fp32 or bf16 over fp16 gradients, every rank's
// gradient 40960 sums to 81920 at 2 ranks, past fp16's largest value (65504): the mean must be taken on the wire
// before it is rounded into the fp16 buffer, or the step overflows and is skipped. (With the default fp16 wire the
// sum itself overflows, as in DeepSpeed, and the loss scaler skips the step.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "linear_probe.h"
#include "tolerance.h"

namespace {

constexpr int64_t kA = (int64_t{1} << 20) + 48, kB = 16;
constexpr int kMicroSteps = 4;

using ds_test::LinearProbe;

// The spacing of the model's dtype at 1.
double spacing(at::ScalarType dtype) { return dtype == at::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10); }

at::Tensor v_of(int64_t n) { return 1.0 + at::arange(n, at::kDouble).remainder(4) / 64.0; }

// Micro-step m's gradient of a then b.
at::Tensor constants(int m, at::ScalarType dtype) {
  const double t = 15.0 / 16.0 * spacing(dtype) / 2;
  at::Tensor v = v_of(kA + kB);
  at::Tensor c = m == 0 ? v : m == 3 ? at::zeros_like(v) : at::full_like(v, t);
  return c.to(at::kFloat);
}

// The weights after one step: minus the window's mean gradient, in the model's dtype.
at::Tensor expected(at::ScalarType dtype, bool in_model_dtype) {
  at::Tensor v = v_of(kA + kB);
  at::Tensor window = in_model_dtype ? v : v + spacing(dtype);
  return (-window / kMicroSteps).to(dtype).to(at::kFloat);
}

struct Outcome {
  at::Tensor params;
  double grad_norm = 0;
  int64_t gradient_bytes = 0;
};

Outcome train_one_step(int stage, at::ScalarType dtype, const std::string& accum) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  LinearProbe model(kA, kB);
  const std::string precision = dtype == at::kBFloat16 ? R"("bf16": {"enabled": true})"
                                                       : R"("fp16": {"enabled": true, "initial_scale_power": 8})";
  std::string json = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "gradient_accumulation_steps": 4,
      "steps_per_print": 1000, "optimizer": {"type": "SGD", "params": {"lr": 1.0}},
      "zero_optimization": {"stage": )" +
                     std::to_string(stage) + R"(, "reduce_bucket_size": 300000}, )" + precision;
  if (!accum.empty()) json += R"(, "data_types": {"grad_accum_dtype": ")" + accum + "\"}";
  json += "}";
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
  Outcome out;
  for (int m = 0; m < kMicroSteps; ++m) {
    at::Tensor c = constants(m, dtype).to(engine.device());
    engine.backward(engine.forward(c.narrow(0, 0, kA), c.narrow(0, kA, kB)));
    if (m == kMicroSteps - 2) out.gradient_bytes = engine.model_state_bytes().gradients;
    engine.step();
  }
  out.grad_norm = engine.get_global_grad_norm();
  deepspeed::zero::GatheredParameters whole(*model, /*modifier_rank=*/-1, /*enabled=*/stage == 3);
  out.params = at::cat({model->a.detach(), model->b.detach()}).to(at::kCPU, at::kFloat);
  return out;
}

double norm_of(const at::Tensor& t) { return t.to(at::kDouble).norm().item<double>(); }

TEST(GradAccumDtype, SixteenBitModelsAccumulateWhereTheKeySays) {
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    const std::string own = dtype == at::kBFloat16 ? "bf16" : "fp16";
    for (int stage : {0, 1, 2, 3}) {
      int64_t fp32_bytes = 0;
      for (const std::string& accum : {std::string(), std::string("fp32"), own}) {
        const std::string name = own + " model, stage " + std::to_string(stage) + ", grad_accum_dtype '" + accum + "'";
        const bool in_model_dtype = accum == own;
        const Outcome run = train_one_step(stage, dtype, accum);
        const at::Tensor want = expected(dtype, in_model_dtype);
        EXPECT_TRUE(at::equal(run.params, want)) << name << ": max difference "
                                                 << (run.params - want).abs().max().item<double>();
        // The norm is taken from the accumulated gradients before the step: exactly -4 x the weights' values for the
        // model's dtype; in fp32 from v + 2t, which the weights show rounded.
        const double t = 15.0 / 16.0 * spacing(dtype) / 2;
        const at::Tensor window = in_model_dtype ? v_of(kA + kB) : v_of(kA + kB) + 2 * t;
        const double norm = norm_of(window / kMicroSteps);
        EXPECT_WITHIN(std::abs(run.grad_norm - norm) / norm,
                      tolerance::reordered(tolerance::kFp32Epsilon, static_cast<int>(kA + kB), 1))
            << name;
        if (accum == "fp32") fp32_bytes = run.gradient_bytes;
        if (in_model_dtype) {
          EXPECT_EQ(2 * run.gradient_bytes, fp32_bytes) << name << ": half of fp32's bytes";
        }
      }
      // The two accumulations must be told apart, else the test proves nothing.
      EXPECT_FALSE(at::equal(expected(dtype, true), expected(dtype, false)));
    }
  }
}

TEST(GradAccumDtype, AWireIntoFp16AveragesBeforeRounding) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  for (const std::string wire : {"fp32", "bf16"}) {
    for (int stage : {0, 1}) {
      const std::string name = "stage " + std::to_string(stage) + ", communication_data_type " + wire;
      LinearProbe model(kA, kB);
      const std::string json = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "steps_per_print": 1000,
          "optimizer": {"type": "SGD", "params": {"lr": 1.52587890625e-05}}, "fp16": {"enabled": true, "loss_scale": 1},
          "communication_data_type": ")" + wire + R"(", "data_types": {"grad_accum_dtype": "fp16"},
          "zero_optimization": {"stage": )" + std::to_string(stage) + "}}";
      auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
      EXPECT_EQ(engine.communication_data_type(), wire == "fp32" ? at::kFloat : at::kBFloat16) << name;
      // 40960 = 160 x 2^8: exact in bf16 and fp16; twice it is past fp16's range.
      const at::Tensor c = at::full({kA + kB}, 40960.0, at::kFloat).to(engine.device());
      engine.backward(engine.forward(c.narrow(0, 0, kA), c.narrow(0, kA, kB)));
      engine.step();
      // lr 2^-16 x 40960 = 0.625, exact in fp16.
      const at::Tensor params = at::cat({model->a.detach(), model->b.detach()}).to(at::kCPU, at::kFloat);
      EXPECT_TRUE(std::isfinite(engine.get_global_grad_norm())) << name << ": the step overflowed";
      EXPECT_TRUE(at::equal(params, at::full_like(params, -0.625))) << name;
    }
  }
}

// Unset, communication_data_type follows 16-bit gradients at stages 0 and 1 (an fp32 wire would be a bucket-sized
// fp32 copy of each bucket, all alive together at the boundary); stage 2 stages in fp32 and reduces in fp32.
TEST(GradAccumDtype, SixteenBitGradientsReduceInTheirDtype) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  for (int stage : {0, 1, 2}) {
    for (const std::string accum : {"bf16", "fp32"}) {
      LinearProbe model(kA, kB);
      const std::string json = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "bf16": {"enabled": true},
          "optimizer": {"type": "SGD", "params": {"lr": 1.0}}, "data_types": {"grad_accum_dtype": ")" + accum +
                               R"("}, "zero_optimization": {"stage": )" + std::to_string(stage) + "}}";
      auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
      const bool sixteen = accum == "bf16" && stage <= 1;
      EXPECT_EQ(engine.communication_data_type(), sixteen ? at::kBFloat16 : at::kFloat)
          << "stage " << stage << ", grad_accum_dtype " << accum;
    }
  }
}

// Refused where the fp32 step would need whole tensors: Lamb's trust ratio (and Muon's matrices).
TEST(GradAccumDtype, AnOptimizerThatStepsWholeTensorsIsRefused) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  LinearProbe model(kA, kB);
  const std::string json = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "bf16": {"enabled": true},
      "optimizer": {"type": "Lamb", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 1},
      "data_types": {"grad_accum_dtype": "bf16"}})";
  try {
    deepspeed::initialize(model, deepspeed::Config::from_string(json));
    FAIL() << "Lamb with gradients accumulated in bf16 must be refused";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data_types.grad_accum_dtype \"bf16\": the step converts the gradients to "
                                         "fp32 a chunk at a time"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
