// communication_data_type: every ZeRO stage reduces the gradients in the dtype the config names, and only across
// ranks (one rank rounds nothing). The gradients are chosen so that the answer is known exactly in any reduction
// order: loss = sum(a * c_a) + sum(b * c_b) makes each rank's gradient exactly its constants c (set per rank), and
// SGD with lr 1 from zero weights leaves -mean(c) in the weights. The constants are
//   group A: an integer 1..3 plus a small offset (1e-4..4e-4) that a cast to bf16 or fp16 rounds away (it is under
//            half of fp16's spacing at 1); every partial sum of the integers is exact in both 16-bit types, so a
//            16-bit reduction gives the integers' sum in any order, an fp32 one keeps the offsets;
//   group B: 1 + 2^-8 on every rank: exact in fp16 (and its partial sums), a tie that bf16 rounds to 1;
//   group C (2 ranks only, where one addition leaves no order to choose): 2 + k 2^-6, exact in bf16, whose sums of
//            two (4 + (1 mod 4) 2^-6) fall halfway between bf16 neighbours and round down to the even one, so a
//            bf16 reduction moves the gradient norm one way (the largest values, so that it shows in the norm).
// The reference is plain LibTorch arithmetic: cast each rank's constants to the wire type, add them exactly, round
// the sum to the wire type once, divide by the ranks in fp32.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "linear_probe.h"
#include "tolerance.h"
#include "zero/make_stage.h"

namespace {

constexpr int64_t kA = 64, kB = 64;  // parameter sizes (b: 16 of group B, then 48 of group C or A)

using ds_test::LinearProbe;

// Rank r's gradient of both parameters, concatenated (a then b).
at::Tensor constants(int r, int world) {
  at::Tensor c = at::empty({kA + kB}, at::kDouble);
  auto group_a = [&](int64_t i) { return 1 + (i + 2 * r) % 3 + 1e-4 * ((i + r) % 4 + 1); };
  for (int64_t i = 0; i < kA; ++i) c[i] = group_a(i);
  for (int64_t i = 0; i < 16; ++i) c[kA + i] = 1.0 + 1.0 / 256;
  for (int64_t i = 16; i < kB; ++i)
    c[kA + i] = world == 2 ? 2.0 + static_cast<double>(4 * (i % 3) + (r == 0 ? 1 : 4)) / 64 : group_a(i);
  return c.to(at::kFloat);
}

// What a correct reduction leaves as the averaged gradient: each rank's gradient held in the model's dtype, cast
// for the wire, summed and rounded to the wire type once (nothing travels on one rank), divided in fp32.
at::Tensor expected_average(int world, at::ScalarType model, at::ScalarType wire) {
  at::Tensor sum = at::zeros({kA + kB}, at::kDouble);
  for (int r = 0; r < world; ++r) {
    at::Tensor held = constants(r, world).to(model).to(at::kFloat);
    sum += world > 1 ? held.to(wire).to(at::kDouble) : held.to(at::kDouble);
  }
  at::Tensor reduced = world > 1 ? sum.to(wire).to(at::kFloat) : sum.to(at::kFloat);
  return reduced * (1.0f / static_cast<float>(world));
}

struct Result {
  at::Tensor params;  // a then b, fp32, after one step
  double grad_norm = 0;
  at::ScalarType reported;
};

Result train_one_step(int stage, at::ScalarType model_dtype, const std::string& comm) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  LinearProbe model(kA, kB);
  std::string json = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0, "steps_per_print": 1000,
      "optimizer": {"type": "SGD", "params": {"lr": 1.0}},
      "zero_optimization": {"stage": )" +
                     std::to_string(stage) + R"(, "reduce_bucket_size": 40, "stage3_param_persistence_threshold": 0})";
  if (!comm.empty()) json += R"(, "communication_data_type": ")" + comm + "\"";
  if (model_dtype == at::kBFloat16) json += R"(, "bf16": {"enabled": true})";
  json += "}";
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
  const int rank = engine.global_rank(), world = engine.world_size();
  at::Tensor c = constants(rank, world).to(engine.device());
  at::Tensor loss = engine.forward(c.narrow(0, 0, kA), c.narrow(0, kA, kB));
  engine.backward(loss);
  engine.step();
  Result out;
  out.grad_norm = engine.get_global_grad_norm();
  out.reported = engine.communication_data_type();
  deepspeed::zero::GatheredParameters full(*model);
  out.params = at::cat({model->a.detach(), model->b.detach()}).to(at::kCPU, at::kFloat);
  return out;
}

at::ScalarType wire_of(const std::string& comm) {
  return comm == "bf16" ? at::kBFloat16 : comm == "fp16" ? at::kHalf : at::kFloat;
}

// Averages differ from the reference by the order of at most `world` additions (the fp32 wire's sums; the 16-bit
// ones are exact by construction); the norm adds the sum of the squares of every element.
double average_bound(int world) { return tolerance::reordered(tolerance::kFp32Epsilon, world, 1); }
double norm_bound(int world) { return tolerance::reordered(tolerance::kFp32Epsilon, world + kA + kB, 1); }

double norm_of(const at::Tensor& t) { return t.to(at::kDouble).norm().item<double>(); }

TEST(CommunicationDataType, Fp32ModelReducesInTheConfiguredTypeAtEveryStage) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  const int world = deepspeed::comm::get_world_size();
  for (int stage : {0, 1, 2, 3}) {
    for (std::string comm : {"", "fp32", "bf16", "fp16"}) {
      const std::string name = "stage " + std::to_string(stage) + " comm '" + comm + "'";
      const at::ScalarType wire = wire_of(comm);
      const Result run = train_one_step(stage, at::kFloat, comm);
      EXPECT_EQ(run.reported, wire) << name;
      const at::Tensor want = expected_average(world, at::kFloat, wire);
      EXPECT_WITHIN(tolerance::relative_max_error(run.params, -want), average_bound(world)) << name;
      EXPECT_WITHIN(std::abs(run.grad_norm - norm_of(want)) / norm_of(want), norm_bound(world)) << name;
    }
  }
  // The three wires must be told apart far beyond the bound (groups A and B), else the test proves nothing.
  if (world > 1) {
    const at::Tensor fp32 = expected_average(world, at::kFloat, at::kFloat);
    const at::Tensor bf16 = expected_average(world, at::kFloat, at::kBFloat16);
    const at::Tensor fp16 = expected_average(world, at::kFloat, at::kHalf);
    EXPECT_GT(tolerance::relative_max_error(fp16, fp32), 20 * average_bound(world));
    EXPECT_GT(tolerance::relative_max_error(bf16, fp16), 20 * average_bound(world));
  }
}

// A bf16 model's gradients are bf16 already: a bf16 wire reduces them in place at stage 3 and through a cast of the
// fp32 buckets at stages 0-2; at 2 ranks group C's sums round, so the fp32 wire is told apart (by the norm: the
// weights themselves are rounded to bf16 after the step).
TEST(CommunicationDataType, Bf16ModelReducesInTheConfiguredType) {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
  const int world = deepspeed::comm::get_world_size();
  for (int stage : {0, 2, 3}) {
    for (std::string comm : {"fp32", "bf16"}) {
      const std::string name = "bf16 model, stage " + std::to_string(stage) + " comm " + comm;
      const Result run = train_one_step(stage, at::kBFloat16, comm);
      const at::Tensor want = expected_average(world, at::kBFloat16, wire_of(comm));
      EXPECT_WITHIN(std::abs(run.grad_norm - norm_of(want)) / norm_of(want), norm_bound(world)) << name;
      EXPECT_TRUE(at::equal(run.params, (-want).to(at::kBFloat16).to(at::kFloat))) << name;
    }
  }
  if (world == 2) {
    const double fp32 = norm_of(expected_average(world, at::kBFloat16, at::kFloat));
    const double bf16 = norm_of(expected_average(world, at::kBFloat16, at::kBFloat16));
    EXPECT_GT(std::abs(fp32 - bf16) / fp32, 20 * norm_bound(world));
  }
}

// DeepSpeed's rule: under sequence parallelism seq_parallel_communication_data_type (default fp32) replaces
// communication_data_type.
TEST(CommunicationDataType, SequenceParallelUsesItsOwnKey) {
  using deepspeed::Config;
  using deepspeed::zero::gradient_communication_dtype;
  EXPECT_EQ(gradient_communication_dtype(Config::from_string("{}")), at::kFloat);
  EXPECT_EQ(gradient_communication_dtype(Config::from_string(R"({"communication_data_type": "bf16"})")),
            at::kBFloat16);
  EXPECT_EQ(gradient_communication_dtype(Config::from_string(
                R"({"communication_data_type": "bf16", "sequence_parallel_size": 2})")),
            at::kFloat);
  EXPECT_EQ(gradient_communication_dtype(Config::from_string(
                R"({"sequence_parallel_size": 2, "seq_parallel_communication_data_type": "fp16"})")),
            at::kHalf);
  EXPECT_EQ(gradient_communication_dtype(Config::from_string(R"({"seq_parallel_communication_data_type": "fp16"})")),
            at::kFloat);
}

}  // namespace
