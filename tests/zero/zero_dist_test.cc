// ZeRO stages 1 and 2 against stage 0 (itself checked against single-process LibTorch in tests/runtime), across
// real ranks: the same parameters after 5 steps with and without accumulation, with uneven partitions, clipping,
// every bucket/all-gather variant, in fp32 and bf16; fp16 overflow skips on every rank; and each rank's model-state
// bytes follow the ZeRO formula.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "counting_allocator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "deepspeed/zero/memory_estimator.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace {

struct Variant {
  std::string name;
  int64_t micro = 2;
  int64_t gas = 1;
  double clip = 0.0;
  bool uneven = false;
  std::string precision;  // "", "bf16"
  std::string zero_extra;  // extra zero_optimization keys, e.g. ", \"reduce_bucket_size\": 100"
};

std::string config_json(const Variant& v, int stage) {
  std::string j = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(v.micro) +
                  ", \"gradient_accumulation_steps\": " + std::to_string(v.gas) +
                  ", \"gradient_clipping\": " + std::to_string(v.clip) +
                  ", \"steps_per_print\": 1000"
                  ", \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.1}}"
                  ", \"zero_optimization\": {\"stage\": " +
                  std::to_string(stage) + v.zero_extra + "}";
  if (v.precision == "bf16") j += ", \"bf16\": {\"enabled\": true}";
  return j + "}";
}

std::vector<at::Tensor> train_stage(const Variant& v, int stage, deepspeed::ModelStateBytes* bytes = nullptr) {
  auto cfg = tiny_gpt::config(v.uneven);
  auto model = tiny_gpt::make_model(cfg);
  auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(v, stage)));
  EXPECT_EQ(engine.zero_optimization_stage(), stage);
  tiny_gpt::train(engine, tiny_gpt::dataset(cfg), 5);
  if (bytes) *bytes = engine.model_state_bytes();
  return tiny_gpt::snapshot(model);
}

// AdamW over 5 steps, stage 1/2 against stage 0 at the same world size: the stages sum each gradient over the
// ranks in another order (reduce-scatter over buckets vs one all-reduce, partition norms vs the whole), and Adam's
// first steps turn those roundings in near-zero gradients into full-size updates, so no closed form holds:
// measured at both SIMD levels (tests/common/tolerance.h). The training moves the weights by ~1e-2 relative, and a
// wrong partition or a lost bucket is off by that much; the gradient scale is checked with SGD in
// zero_reference_dist_test.cc.
const double kAdamStages = tolerance::measured(3.4e-6, 3.5e-6);
// bf16 parameters: stage 0 and stage N round fp32 masters that differ by the above to bf16, so now and then an
// element lands one bf16 epsilon (7.8e-3) apart, and the next steps carry it on: measured, 0 at most world sizes
// and 9.3e-3 (one tensor, 3 ranks) at both SIMD levels.
const double kBf16Stages = tolerance::measured(9.4e-3, 9.4e-3);

void expect_stages_match(const Variant& v, double bound) {
  bound = tiny_gpt::bound_at_this_world(bound);
  auto reference = train_stage(v, 0);
  auto initial = tiny_gpt::snapshot(tiny_gpt::make_model(tiny_gpt::config(v.uneven)));
  ASSERT_GT(tiny_gpt::max_relative_error(reference, initial), 1e-3 + 10 * bound) << "training must move the parameters";
  for (int stage : {1, 2}) {
    EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(v, stage), reference), bound)
        << v.name << ": stage " << stage << " vs stage 0";
  }
}

TEST(ZeroStages, Fp32MatchesStageZero) { expect_stages_match({"fp32"}, kAdamStages); }

TEST(ZeroStages, Fp32WithAccumulationMatchesStageZero) {
  Variant v{"fp32 gas 4"};
  v.micro = 1;
  v.gas = 4;
  expect_stages_match(v, kAdamStages);
}

TEST(ZeroStages, UnevenPartitionsAndClippingMatchStageZero) {
  Variant v{"uneven + clip"};
  v.uneven = true;
  v.clip = 0.1;
  expect_stages_match(v, kAdamStages);
}

TEST(ZeroStages, SmallBucketsAndChunkedAllGatherMatchStageZero) {
  Variant v{"small buckets"};
  v.uneven = true;
  v.gas = 2;
  v.zero_extra = ", \"reduce_bucket_size\": 300, \"allgather_bucket_size\": 500, \"overlap_comm\": true";
  expect_stages_match(v, kAdamStages);
}

TEST(ZeroStages, AllReduceAndBroadcastVariantsMatchStageZero) {
  // Without reduce-scatter the stages all-reduce each gradient exactly as stage 0 does, and the optimizer's
  // elementwise update gives the same bits on a partition as on the whole buffer: bit equality at every world size.
  Variant v{"reduce_scatter=false, allgather_partitions=false, no overlap"};
  v.zero_extra = ", \"reduce_scatter\": false, \"allgather_partitions\": false, \"overlap_comm\": false";
  expect_stages_match(v, tolerance::exact());
}

// zero_optimization.compute_grad_norm false (DeepSpeed 0.19): stages 1 and 2 skip the norm, its pass over the
// gradients and its all-reduce. The training is the same bits (without clipping the norm feeds nothing),
// get_global_grad_norm() says -1 (DeepSpeed's None), and each step issues one all-reduce fewer.
TEST(ZeroStages, SkippingTheGradientNormChangesOnlyTheNorm) {
  tiny_gpt::ensure_comm();
  constexpr int kSteps = 3;
  auto run = [&](int stage, bool compute, double* norm, int64_t* all_reduces) {
    Variant v{"compute_grad_norm"};
    v.uneven = true;
    v.zero_extra = std::string(", \"compute_grad_norm\": ") + (compute ? "true" : "false");
    auto cfg = tiny_gpt::config(true);
    auto model = tiny_gpt::make_model(cfg);
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(v, stage)));
    deepspeed::comm::CommsLoggerOptions logged;
    logged.enabled = true;
    deepspeed::comm::configure_comms_logger(logged);
    deepspeed::comm::reset_comms_logger();
    tiny_gpt::train(engine, tiny_gpt::dataset(cfg), kSteps);
    *norm = engine.get_global_grad_norm();
    *all_reduces = 0;
    for (const auto& stat : deepspeed::comm::comms_stats())
      if (stat.op == "all_reduce") *all_reduces += stat.count;
    deepspeed::comm::configure_comms_logger({});
    return tiny_gpt::snapshot(model);
  };
  for (int stage : {1, 2}) {
    double norm = 0, no_norm = 0;
    int64_t all_reduces = 0, fewer = 0;
    const auto with = run(stage, true, &norm, &all_reduces);
    const auto without = run(stage, false, &no_norm, &fewer);
    EXPECT_EQ(tiny_gpt::max_relative_error(without, with), 0.0) << "stage " << stage;
    EXPECT_GT(norm, 0.0) << "stage " << stage;
    EXPECT_EQ(no_norm, -1.0) << "stage " << stage;
    if (deepspeed::comm::get_world_size() > 1) {
      EXPECT_EQ(all_reduces - fewer, kSteps) << "stage " << stage;
    }
  }
}

// gradient_allreduce_op "sum" (DeepSpeed 0.19): the ranks' gradients are added, not averaged, so SGD at lr takes the
// step "mean" takes at lr x world (at world 1 the same bits). What differs is where lr x world is rounded: a few
// fp32 ulps of an update, far below a gradient off by the world size (or averaged twice), which moves the weights
// by the whole update (~1e-2 relative here). With prescale_gradients and a predivide factor, which "sum" ignores.
TEST(ZeroStages, SummedGradientsTakeTheMeansStepTimesTheWorld) {
  tiny_gpt::ensure_comm();
  const int n = deepspeed::comm::get_world_size();
  constexpr double kLr = 0.05;
  auto run = [&](int stage, const std::string& op, double lr, const std::string& extra) {
    auto cfg = tiny_gpt::config(true);
    auto model = tiny_gpt::make_model(cfg);
    const std::string json = "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2, "
                             "\"gradient_clipping\": 0, \"steps_per_print\": 1000, \"gradient_allreduce_op\": \"" +
                             op + "\"" + extra + ", \"optimizer\": " + tiny_gpt::sgd_json(lr) +
                             ", \"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}}";
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
    tiny_gpt::train(engine, tiny_gpt::dataset(cfg), 3);
    return tiny_gpt::snapshot(model);
  };
  const auto initial = tiny_gpt::snapshot(tiny_gpt::make_model(tiny_gpt::config(true)));
  for (int stage : {0, 1, 2}) {
    const auto mean = run(stage, "mean", kLr * n, "");
    ASSERT_GT(tiny_gpt::max_relative_error(mean, initial), 1e-3) << "training must move the parameters";
    for (const std::string extra : {"", ", \"prescale_gradients\": true", ", \"gradient_predivide_factor\": 4"}) {
      const auto sum = run(stage, "sum", kLr, extra);
      if (n == 1) {
        EXPECT_EQ(tiny_gpt::max_relative_error(sum, mean), 0.0) << "stage " << stage << extra;
      } else {
        // Four roundings of each update (lr x world, 1 / world, the two products) per step.
        EXPECT_WITHIN(tiny_gpt::max_relative_error(sum, mean), tolerance::reordered(tolerance::kFp32Epsilon, 4, 3))
            << "stage " << stage << extra;
      }
    }
  }
}

TEST(ZeroStages, Bf16MatchesStageZeroBf16) {
  // Each stage keeps fp32 masters and fp32 gradient accumulation; what differs is only where sums are taken, so
  // the bf16 parameters agree to bf16 rounding (8 bits of mantissa: ~4e-3 relative).
  Variant v{"bf16"};
  v.precision = "bf16";
  v.gas = 2;
  expect_stages_match(v, kBf16Stages);
  // bf16 against fp32 training: every forward and backward rounds to bf16 (8 bits), so the weights drift from fp32's
  // by many bf16 epsilons over 5 steps: measured; a bf16 run that trained on garbage would be off by ~1.
  auto fp32 = train_stage(Variant{"fp32"}, 0);
  Variant b{"bf16 vs fp32"};
  b.precision = "bf16";
  EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(b, 2), fp32), tolerance::measured(5.3e-2, 5.3e-2))
      << "bf16 should track fp32 training";
}

TEST(ZeroOffload, CpuOffloadMatchesStageZero) {
  Variant v{"offload cpu"};
  v.uneven = true;
  v.gas = 2;
  v.clip = 0.1;
  v.zero_extra = ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}";
  auto reference = train_stage(Variant{"plain", 2, 2, 0.1, true}, 0);
  for (int stage : {1, 2}) {
    deepspeed::ModelStateBytes bytes;
    EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(v, stage, &bytes), reference),
                  tiny_gpt::bound_at_this_world(kAdamStages))
        << "stage " << stage << " with cpu offload vs stage 0";
    // Host holds the fp32 master, Adam's two states and a gradient copy of this rank's partition.
    const int n = deepspeed::comm::get_world_size();
    const int64_t part = bytes.params / 4 / n;
    EXPECT_EQ(bytes.master_weights, 4 * part);
    EXPECT_EQ(bytes.offloaded_to_host, (4 + 8 + 4) * part);
  }
  Variant b = v;
  b.precision = "bf16";
  auto bf16_reference = train_stage(Variant{"bf16", 2, 2, 0.1, true, "bf16"}, 0);
  EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(b, 2), bf16_reference), tiny_gpt::bound_at_this_world(kBf16Stages))
      << "bf16 + cpu offload";
}

// With offload_optimizer "cpu" each bucket's final gradients go to host memory as its reduction completes in the
// boundary backward (on a GPU on a copy stream, overlapping the rest of backward), not all at the step: each rank's
// whole partition once per step, none in the other micro-steps, and the step reads what a copy at the step would
// (the run matches stage 0; CpuOffloadMatchesStageZero above takes this path too). Small buckets with overlap_comm off
// complete in the hooks and, past the staging limit, from the buffer pool. At world 1 stage 1 reduces nothing and its
// copies stay at the step. Not with overlap_step, whose step reads the host gradients while the next backward runs.
TEST(ZeroOffload, CpuOffloadCopiesEachFinalGradientDuringBackward) {
  tiny_gpt::ensure_comm();
  constexpr int kSteps = 3;
  const int n = deepspeed::comm::get_world_size();
  const std::string offload = "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true";
  auto run = [&](int stage, const std::string& zero_extra, int64_t* copied, int64_t* partition) {
    Variant v{"offload cpu gas 2", 2, 2, 100.0, true};  // clipping that never binds: the norm is read, not used
    v.zero_extra = zero_extra;
    auto cfg = tiny_gpt::config(true);
    auto model = tiny_gpt::make_model(cfg);
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(config_json(v, stage)));
    tiny_gpt::train(engine, tiny_gpt::dataset(cfg), kSteps);
    if (copied) *copied = engine.stage3_stats().host_grad_copies_in_backward;
    if (partition) *partition = engine.model_state_bytes().params / 4 / n;  // fp32: the padded flat buffer / ranks
    return tiny_gpt::snapshot(model);
  };
  const auto reference = run(0, "", nullptr, nullptr);
  for (int stage : {1, 2}) {
    for (const std::string& extra : {", " + offload + "}", ", \"overlap_comm\": false, \"reduce_bucket_size\": 2000, " +
                                                           offload + "}"}) {
      int64_t copied = -1, partition = 0;
      const auto got = run(stage, extra, &copied, &partition);
      ASSERT_GT(partition, 0);
      const int64_t want = stage == 1 && n == 1 ? 0 : kSteps * partition;
      EXPECT_EQ(copied, want) << "stage " << stage << extra << ": each step's final gradients, once, in backward";
      EXPECT_WITHIN(tiny_gpt::max_relative_error(got, reference), tiny_gpt::bound_at_this_world(kAdamStages))
          << "stage " << stage << extra << " vs stage 0";
    }
  }
  int64_t copied = -1;
  run(2, ", " + offload + ", \"overlap_step\": true}", &copied, nullptr);
  EXPECT_EQ(copied, 0) << "overlap_step: the host gradients are copied at the step";
}

std::string nvme_dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/ds_nvme_test_XXXXXX";
    std::string d = mkdtemp(tmpl);
    return d;
  }();
  return dir;
}

TEST(ZeroOffload, NvmeOffloadMatchesStageZero) {
  tiny_gpt::ensure_comm();
  // sub_group_size 1000 (rounded to 1024 elements) splits each partition into several sub-groups.
  for (bool pipeline : {false, true}) {
    Variant v{"offload nvme"};
    v.uneven = true;
    v.gas = 2;
    v.clip = 0.1;
    v.zero_extra = std::string(", \"sub_group_size\": 1000, \"offload_optimizer\": {\"device\": \"nvme\", ") +
                   "\"nvme_path\": \"" + nvme_dir() + "\", \"buffer_count\": " + (pipeline ? "9" : "3") +
                   ", \"pipeline_read\": " + (pipeline ? "true" : "false") + "}";
    auto reference = train_stage(Variant{"plain", 2, 2, 0.1, true}, 0);
    for (int stage : {1, 2, 3}) {
      deepspeed::ModelStateBytes bytes;
      EXPECT_WITHIN(tiny_gpt::max_relative_error(train_stage(v, stage, &bytes), reference),
                    tiny_gpt::bound_at_this_world(kAdamStages))
          << "stage " << stage << " nvme offload (pipeline " << pipeline << ") vs stage 0";
      // Resident optimizer state is the buffer pool: (1 or 3) sets of master + 2 Adam states, 1024 floats each.
      EXPECT_EQ(bytes.optimizer_states, (pipeline ? 3 : 1) * 3 * 1024 * 4) << "stage " << stage;
    }
  }
  // bf16: the kernel writes the rounded parameters in its pass over each swapped slice, exactly as the cpu offload's
  // fused copy-back does over the whole partition, so the two agree bit for bit.
  Variant nvme{"offload nvme bf16"};
  nvme.uneven = true;
  nvme.precision = "bf16";
  nvme.zero_extra = ", \"sub_group_size\": 1000, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" +
                    nvme_dir() + "\"}";
  Variant cpu = nvme;
  cpu.zero_extra = ", \"offload_optimizer\": {\"device\": \"cpu\"}";
  for (int stage : {1, 2, 3}) {
    auto a = train_stage(nvme, stage), b = train_stage(cpu, stage);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(at::equal(a[i], b[i])) << "stage " << stage << " bf16 nvme vs cpu offload, parameter " << i;
  }
  deepspeed::comm::barrier();  // every rank's swapper is gone before the directory goes
  std::filesystem::remove_all(nvme_dir());  // each rank made its own
}

TEST(ZeroOffload, NvmePathThatCannotBeCreatedIsAClearError) {
  tiny_gpt::ensure_comm();
  auto cfg = tiny_gpt::config();
  auto model = tiny_gpt::make_model(cfg);
  auto json = R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Adam"},
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/proc/no_such_dir"}}})";
  try {
    deepspeed::initialize(model, deepspeed::Config::from_string(json));
    FAIL() << "expected an error for an nvme_path under /proc";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no_such_dir"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nvme_path"), std::string::npos) << e.what();
  }
}

// With DeepSpeed's default bucket sizes (no bucket key in the config: reduce_bucket_size 5e8 elements, a whole copy
// of this model's gradients; stage3_max_live_parameters and stage3_max_reuse_distance 1e9, the whole model), each
// stage's peak of live tensor bytes during training is below the previous stage's: stage 2 sizes its reduce buckets
// from the model it has, stage 3 what it keeps gathered and its gradients in flight (zero/stage3/working_set.h).
// Measured by a counting CPU allocator (what the tensors hold, whatever the C allocator keeps), from the second step
// on, when stage 3 follows its recorded trace (prefetch and reuse).
TEST(ZeroMemory, DefaultBucketsKeepEachStageBelowTheLast) {
  tiny_gpt::ensure_comm();
  if (deepspeed::comm::get_world_size() < 2) GTEST_SKIP() << "no partitioning at one rank";
  auto c = tiny_gpt::config();
  c.layers = 8;
  c.hidden = 192;
  c.heads = 4;
  const at::Tensor data = tiny_gpt::dataset(c);
  int64_t previous = 0;
  for (int stage : {0, 1, 2, 3}) {
    CountingAllocator counter;
    int64_t peak = 0;
    {
      CountingAllocator::Scope scope(&counter);
      const auto config = deepspeed::Config::from_string(R"({"train_micro_batch_size_per_gpu": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": )" +
                                                         std::to_string(stage) + "}}");
      c.shard_blocks = stage == 3;  // every block a unit, partitioned as it is built
      auto model = [&] {
        deepspeed::zero::Init init(config);
        return tiny_gpt::make_model(c);
      }();
      auto engine = deepspeed::initialize(model, config);
      tiny_gpt::train(engine, data, 1);  // optimizer states exist from here on; construction's peak is not the step's
      counter.reset_peak();
      tiny_gpt::train(engine, data, 2, /*first_step=*/1);
      peak = counter.peak();
    }
    if (stage > 0) {
      EXPECT_LT(peak, previous) << "stage " << stage << " holds no less than stage " << stage - 1;
    }
    previous = peak;
  }
}

TEST(ZeroMemory, ModelStateBytesFollowTheFormula) {
  tiny_gpt::ensure_comm();
  const int n = deepspeed::comm::get_world_size();
  Variant v{"memory"};
  v.uneven = true;
  v.zero_extra = ", \"reduce_bucket_size\": 256";
  deepspeed::ModelStateBytes s0, s1, s2;
  train_stage(v, 0, &s0);
  train_stage(v, 1, &s1);
  train_stage(v, 2, &s2);
  // Psi: the flat buffer's elements (padded to split evenly at stages 1/2). fp32 AdamW: 4 bytes of parameters,
  // 4 of gradients and 8 of optimizer state per element; fp32 parameters are their own masters.
  const int64_t psi0 = s0.params / 4, psi = s1.params / 4;
  EXPECT_EQ(psi % n, 0);
  EXPECT_GE(psi, psi0);
  EXPECT_LT(psi - psi0, 16 * n) << "padding is less than one aligned unit per rank";
  EXPECT_EQ(s0.gradients, 4 * psi0);
  EXPECT_EQ(s0.optimizer_states, 8 * psi0);
  EXPECT_EQ(s0.master_weights, 0);
  EXPECT_EQ(s1.gradients, 4 * psi);
  EXPECT_EQ(s1.optimizer_states, 8 * psi / n);
  EXPECT_EQ(s2.params, 4 * psi);
  EXPECT_EQ(s2.gradients, 4 * psi / n);
  EXPECT_EQ(s2.optimizer_states, 8 * psi / n);
  // Staging holds at most a few buckets (a bucket is at least one whole parameter), not a full gradient.
  int64_t largest = 0;
  for (const auto& p : tiny_gpt::make_model(tiny_gpt::config(true))->parameters()) largest = std::max(largest, p.numel());
  EXPECT_LE(s2.working_buffers, 3 * (largest + 256) * 4) << "stage 2 stages gradients in a few small buckets";
  if (n > 1) {
    EXPECT_LT(s2.total(), s1.total());
    EXPECT_LT(s1.total(), s0.total());
  }
  // The estimator users plan with gives the same figures for the same flat size.
  using deepspeed::zero::Precision;
  auto e1 = deepspeed::zero::estimate_model_states_mem_needs(psi, n, 1, Precision::kFp32);
  auto e2 = deepspeed::zero::estimate_model_states_mem_needs(psi, n, 2, Precision::kFp32);
  EXPECT_EQ(e1.gradients, s1.gradients);
  EXPECT_EQ(e1.optimizer_states, s1.optimizer_states);
  EXPECT_EQ(e2.gradients, s2.gradients);
  EXPECT_EQ(e2.optimizer_states, s2.optimizer_states);
  EXPECT_EQ(e2.params, s2.params);
}

TEST(ZeroMemory, Bf16KeepsFp32MastersPartitioned) {
  tiny_gpt::ensure_comm();
  const int n = deepspeed::comm::get_world_size();
  Variant v{"bf16 memory"};
  v.precision = "bf16";
  deepspeed::ModelStateBytes s2;
  train_stage(v, 2, &s2);
  const int64_t psi = s2.params / 2;  // bf16 parameters
  EXPECT_EQ(s2.master_weights, 4 * psi / n);
  EXPECT_EQ(s2.optimizer_states, 8 * psi / n);
  EXPECT_EQ(s2.gradients, 4 * psi / n);
}

}  // namespace
