// The ZeRO memory estimator against figures computed by hand from the layout documented in
// deepspeed/zero/memory_estimator.h. Ψ = 1000 divides by N = 1, 2, 4, so a rank's partition is 1000
// / N.
#include "deepspeed/zero/memory_estimator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

constexpr OffloadTarget kNone = OffloadTarget::kNone;
constexpr OffloadTarget kCpu = OffloadTarget::kCpu;
constexpr OffloadTarget kNvme = OffloadTarget::kNvme;
constexpr Precision kFp32 = Precision::kFp32;
constexpr Precision kBf16 = Precision::kBf16;

struct Case {
  int stage;
  Precision precision;
  OffloadTarget offload;
  int ranks;
  int64_t params, gradients, master, states, cpu, nvme;
};

// Bytes per parameter: bf16 params 2, fp32 gradients 4, fp32 master 4 (none in fp32 training: the
// parameters are the master), Adam exp_avg + exp_avg_sq 8. Offload moves master + states (4 + 8) to
// the target and keeps the fp32 gradient partition (4) in host memory; at stages 2 and 3 the device
// then keeps no gradients.
const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      // stage 0: nothing partitioned, N does not matter.
      {0, kBf16, kNone, 1, 2 * 1000, 4 * 1000, 4 * 1000, 8 * 1000, 0, 0},
      {0, kBf16, kNone, 2, 2 * 1000, 4 * 1000, 4 * 1000, 8 * 1000, 0, 0},
      {0, kBf16, kNone, 4, 2 * 1000, 4 * 1000, 4 * 1000, 8 * 1000, 0, 0},
      {0, kFp32, kNone, 1, 4 * 1000, 4 * 1000, 0, 8 * 1000, 0, 0},
      {0, kFp32, kNone, 2, 4 * 1000, 4 * 1000, 0, 8 * 1000, 0, 0},
      {0, kFp32, kNone, 4, 4 * 1000, 4 * 1000, 0, 8 * 1000, 0, 0},
      // stage 1: full params and gradients, master + states partitioned.
      {1, kBf16, kNone, 1, 2 * 1000, 4 * 1000, 4 * 1000, 8 * 1000, 0, 0},
      {1, kBf16, kNone, 2, 2 * 1000, 4 * 1000, 4 * 500, 8 * 500, 0, 0},
      {1, kBf16, kNone, 4, 2 * 1000, 4 * 1000, 4 * 250, 8 * 250, 0, 0},
      {1, kBf16, kCpu, 1, 2 * 1000, 4 * 1000, 0, 0, (4 + 8 + 4) * 1000, 0},
      {1, kBf16, kCpu, 2, 2 * 1000, 4 * 1000, 0, 0, (4 + 8 + 4) * 500, 0},
      {1, kBf16, kCpu, 4, 2 * 1000, 4 * 1000, 0, 0, (4 + 8 + 4) * 250, 0},
      {1, kBf16, kNvme, 1, 2 * 1000, 4 * 1000, 0, 0, 4 * 1000, (4 + 8) * 1000},
      {1, kBf16, kNvme, 2, 2 * 1000, 4 * 1000, 0, 0, 4 * 500, (4 + 8) * 500},
      {1, kBf16, kNvme, 4, 2 * 1000, 4 * 1000, 0, 0, 4 * 250, (4 + 8) * 250},
      {1, kFp32, kNone, 1, 4 * 1000, 4 * 1000, 0, 8 * 1000, 0, 0},
      {1, kFp32, kNone, 2, 4 * 1000, 4 * 1000, 0, 8 * 500, 0, 0},
      {1, kFp32, kNone, 4, 4 * 1000, 4 * 1000, 0, 8 * 250, 0, 0},
      {1, kFp32, kCpu, 1, 4 * 1000, 4 * 1000, 0, 0, (4 + 8 + 4) * 1000, 0},
      {1, kFp32, kCpu, 2, 4 * 1000, 4 * 1000, 0, 0, (4 + 8 + 4) * 500, 0},
      {1, kFp32, kCpu, 4, 4 * 1000, 4 * 1000, 0, 0, (4 + 8 + 4) * 250, 0},
      {1, kFp32, kNvme, 1, 4 * 1000, 4 * 1000, 0, 0, 4 * 1000, (4 + 8) * 1000},
      {1, kFp32, kNvme, 2, 4 * 1000, 4 * 1000, 0, 0, 4 * 500, (4 + 8) * 500},
      {1, kFp32, kNvme, 4, 4 * 1000, 4 * 1000, 0, 0, 4 * 250, (4 + 8) * 250},
      // stage 2: gradients partitioned too.
      {2, kBf16, kNone, 1, 2 * 1000, 4 * 1000, 4 * 1000, 8 * 1000, 0, 0},
      {2, kBf16, kNone, 2, 2 * 1000, 4 * 500, 4 * 500, 8 * 500, 0, 0},
      {2, kBf16, kNone, 4, 2 * 1000, 4 * 250, 4 * 250, 8 * 250, 0, 0},
      {2, kBf16, kCpu, 1, 2 * 1000, 0, 0, 0, (4 + 8 + 4) * 1000, 0},
      {2, kBf16, kCpu, 2, 2 * 1000, 0, 0, 0, (4 + 8 + 4) * 500, 0},
      {2, kBf16, kCpu, 4, 2 * 1000, 0, 0, 0, (4 + 8 + 4) * 250, 0},
      {2, kBf16, kNvme, 1, 2 * 1000, 0, 0, 0, 4 * 1000, (4 + 8) * 1000},
      {2, kBf16, kNvme, 2, 2 * 1000, 0, 0, 0, 4 * 500, (4 + 8) * 500},
      {2, kBf16, kNvme, 4, 2 * 1000, 0, 0, 0, 4 * 250, (4 + 8) * 250},
      {2, kFp32, kNone, 1, 4 * 1000, 4 * 1000, 0, 8 * 1000, 0, 0},
      {2, kFp32, kNone, 2, 4 * 1000, 4 * 500, 0, 8 * 500, 0, 0},
      {2, kFp32, kNone, 4, 4 * 1000, 4 * 250, 0, 8 * 250, 0, 0},
      {2, kFp32, kCpu, 1, 4 * 1000, 0, 0, 0, (4 + 8 + 4) * 1000, 0},
      {2, kFp32, kCpu, 2, 4 * 1000, 0, 0, 0, (4 + 8 + 4) * 500, 0},
      {2, kFp32, kCpu, 4, 4 * 1000, 0, 0, 0, (4 + 8 + 4) * 250, 0},
      {2, kFp32, kNvme, 1, 4 * 1000, 0, 0, 0, 4 * 1000, (4 + 8) * 1000},
      {2, kFp32, kNvme, 2, 4 * 1000, 0, 0, 0, 4 * 500, (4 + 8) * 500},
      {2, kFp32, kNvme, 4, 4 * 1000, 0, 0, 0, 4 * 250, (4 + 8) * 250},
      // stage 3: everything partitioned.
      {3, kBf16, kNone, 1, 2 * 1000, 4 * 1000, 4 * 1000, 8 * 1000, 0, 0},
      {3, kBf16, kNone, 2, 2 * 500, 4 * 500, 4 * 500, 8 * 500, 0, 0},
      {3, kBf16, kNone, 4, 2 * 250, 4 * 250, 4 * 250, 8 * 250, 0, 0},
      {3, kBf16, kCpu, 1, 2 * 1000, 0, 0, 0, (4 + 8 + 4) * 1000, 0},
      {3, kBf16, kCpu, 2, 2 * 500, 0, 0, 0, (4 + 8 + 4) * 500, 0},
      {3, kBf16, kCpu, 4, 2 * 250, 0, 0, 0, (4 + 8 + 4) * 250, 0},
      {3, kBf16, kNvme, 1, 2 * 1000, 0, 0, 0, 4 * 1000, (4 + 8) * 1000},
      {3, kBf16, kNvme, 2, 2 * 500, 0, 0, 0, 4 * 500, (4 + 8) * 500},
      {3, kBf16, kNvme, 4, 2 * 250, 0, 0, 0, 4 * 250, (4 + 8) * 250},
      {3, kFp32, kNone, 1, 4 * 1000, 4 * 1000, 0, 8 * 1000, 0, 0},
      {3, kFp32, kNone, 2, 4 * 500, 4 * 500, 0, 8 * 500, 0, 0},
      {3, kFp32, kNone, 4, 4 * 250, 4 * 250, 0, 8 * 250, 0, 0},
      {3, kFp32, kCpu, 1, 4 * 1000, 0, 0, 0, (4 + 8 + 4) * 1000, 0},
      {3, kFp32, kCpu, 2, 4 * 500, 0, 0, 0, (4 + 8 + 4) * 500, 0},
      {3, kFp32, kCpu, 4, 4 * 250, 0, 0, 0, (4 + 8 + 4) * 250, 0},
      {3, kFp32, kNvme, 1, 4 * 1000, 0, 0, 0, 4 * 1000, (4 + 8) * 1000},
      {3, kFp32, kNvme, 2, 4 * 500, 0, 0, 0, 4 * 500, (4 + 8) * 500},
      {3, kFp32, kNvme, 4, 4 * 250, 0, 0, 0, 4 * 250, (4 + 8) * 250},
  };
  return kCases;
}

TEST(MemoryEstimator, EveryStagePrecisionOffloadAndWorldSize) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message()
                 << "stage " << c.stage << " " << precision_name(c.precision) << " offload "
                 << offload_target_name(c.offload) << " N " << c.ranks);
    MemoryEstimate e =
        estimate_model_states_mem_needs(1000, c.ranks, c.stage, c.precision, c.offload);
    EXPECT_EQ(e.params, c.params);
    EXPECT_EQ(e.gradients, c.gradients);
    EXPECT_EQ(e.master_weights, c.master);
    EXPECT_EQ(e.optimizer_states, c.states);
    EXPECT_EQ(e.working_buffers, 0);
    EXPECT_EQ(e.offloaded_cpu, c.cpu);
    EXPECT_EQ(e.offloaded_nvme, c.nvme);
    EXPECT_EQ(e.total(), c.params + c.gradients + c.master + c.states);
    EXPECT_EQ(e.host_and_device(), c.params + c.gradients + c.master + c.states + c.cpu);
  }
}

TEST(MemoryEstimator, Fp16HasTheBf16Layout) {
  // Both are 2-byte working precisions with fp32 gradients, master and states: stage 2, N = 4
  // without offload is 2 * 1000 params + 4 * 250 gradients + 4 * 250 master + 8 * 250 states = 6000
  // bytes.
  MemoryEstimate e = estimate_model_states_mem_needs(1000, 4, 2, Precision::kFp16);
  EXPECT_EQ(e.params, 2 * 1000);
  EXPECT_EQ(e.gradients, 4 * 250);
  EXPECT_EQ(e.master_weights, 4 * 250);
  EXPECT_EQ(e.optimizer_states, 8 * 250);
  EXPECT_EQ(e.total(), 6000);
}

TEST(MemoryEstimator, MixedPrecisionStageTotalsFollowKEquals12) {
  // With 4-byte gradients: stage 0 (2+4+12)Ψ, stage 1 (2+4)Ψ + 12Ψ/N, stage 2 2Ψ + (4+12)Ψ/N, stage
  // 3 (2+4+12)Ψ/N.
  EXPECT_EQ(estimate_model_states_mem_needs(1000, 4, 0, kBf16).total(), 18 * 1000);
  EXPECT_EQ(estimate_model_states_mem_needs(1000, 4, 1, kBf16).total(), 6 * 1000 + 12 * 1000 / 4);
  EXPECT_EQ(estimate_model_states_mem_needs(1000, 4, 2, kBf16).total(), 2 * 1000 + 16 * 1000 / 4);
  EXPECT_EQ(estimate_model_states_mem_needs(1000, 4, 3, kBf16).total(), 18 * 1000 / 4);
}

TEST(MemoryEstimator, NonDivisibleCountRoundsUpToThePaddedPartition) {
  // Ψ = 1001 on 4 ranks pads to 1004 elements: 251 per rank.
  MemoryEstimate s1 = estimate_model_states_mem_needs(1001, 4, 1, kBf16);
  EXPECT_EQ(s1.params, 2 * 1004);
  EXPECT_EQ(s1.gradients, 4 * 1004);
  EXPECT_EQ(s1.master_weights, 4 * 251);
  EXPECT_EQ(s1.optimizer_states, 8 * 251);
  MemoryEstimate s3 = estimate_model_states_mem_needs(1001, 4, 3, kFp32);
  EXPECT_EQ(s3.params, 4 * 251);
  EXPECT_EQ(s3.gradients, 4 * 251);
  EXPECT_EQ(s3.optimizer_states, 8 * 251);
  // Stage 0 does not partition, so it does not pad.
  EXPECT_EQ(estimate_model_states_mem_needs(1001, 4, 0, kFp32).params, 4 * 1001);
}

TEST(MemoryEstimator, Stage2CountsTwoFp32ReduceBuckets) {
  // 2 buckets x 100 elements x 4 bytes.
  EXPECT_EQ(
      estimate_model_states_mem_needs(1000, 2, 2, kBf16, kNone, kNone, 0, 100).working_buffers,
      2 * 100 * 4);
  MemoryEstimate offloaded =
      estimate_model_states_mem_needs(1000, 2, 2, kBf16, kCpu, kNone, 0, 100);
  EXPECT_EQ(offloaded.working_buffers, 2 * 100 * 4);  // buckets stay on the device under offload
  EXPECT_EQ(offloaded.total(), 2 * 1000 + 2 * 100 * 4);
  // Other stages do not count the bucket.
  EXPECT_EQ(
      estimate_model_states_mem_needs(1000, 2, 1, kBf16, kNone, kNone, 0, 100).working_buffers, 0);
}

TEST(MemoryEstimator, Stage3CountsTheGatheredLargestLayer) {
  // The largest layer gathered in the working precision: 300 x 2 bytes in bf16, 300 x 4 in fp32.
  MemoryEstimate bf16 = estimate_model_states_mem_needs(1000, 4, 3, kBf16, kNone, kNone, 300);
  EXPECT_EQ(bf16.working_buffers, 300 * 2);
  EXPECT_EQ(bf16.total(), 18 * 250 + 300 * 2);
  EXPECT_EQ(estimate_model_states_mem_needs(1000, 4, 3, kFp32, kNone, kNone, 300).working_buffers,
            300 * 4);
  // Stage 2 keeps full parameters, so there is nothing to gather.
  EXPECT_EQ(estimate_model_states_mem_needs(1000, 4, 2, kFp32, kNone, kNone, 300).working_buffers,
            0);
}

TEST(MemoryEstimator, Stage3ParamOffloadMovesThePartition) {
  // Both offloaded to CPU at N = 4: only the gathered layer (100 x 2) stays on the device; the host
  // holds the bf16 partition 2 x 250, gradients 4 x 250, master 4 x 250 and states 8 x 250.
  MemoryEstimate both = estimate_model_states_mem_needs(1000, 4, 3, kBf16, kCpu, kCpu, 100);
  EXPECT_EQ(both.params, 0);
  EXPECT_EQ(both.total(), 100 * 2);
  EXPECT_EQ(both.offloaded_cpu, (2 + 4 + 4 + 8) * 250);
  EXPECT_EQ(both.offloaded_nvme, 0);
  // Parameters to NVMe, optimizer on the device.
  MemoryEstimate params_only = estimate_model_states_mem_needs(1000, 4, 3, kBf16, kNone, kNvme);
  EXPECT_EQ(params_only.params, 0);
  EXPECT_EQ(params_only.offloaded_nvme, 2 * 250);
  EXPECT_EQ(params_only.offloaded_cpu, 0);
  EXPECT_EQ(params_only.total(), (4 + 4 + 8) * 250);
}

TEST(MemoryEstimator, PaperFormulas) {
  // ZeRO paper, Ψ = 1000, N = 4, K = 12: (2+2+12)Ψ; 2Ψ+2Ψ+12Ψ/N; 2Ψ+(2+12)Ψ/N; (2+2+12)Ψ/N.
  EXPECT_EQ(estimate_model_states_mem_needs_paper(1000, 4, 0).total(), 16 * 1000);
  EXPECT_EQ(estimate_model_states_mem_needs_paper(1000, 4, 1).total(), 4 * 1000 + 12 * 1000 / 4);
  EXPECT_EQ(estimate_model_states_mem_needs_paper(1000, 4, 2).total(), 2 * 1000 + 14 * 1000 / 4);
  EXPECT_EQ(estimate_model_states_mem_needs_paper(1000, 4, 3).total(), 16 * 1000 / 4);
  MemoryEstimate s2 = estimate_model_states_mem_needs_paper(1000, 4, 2);
  EXPECT_EQ(s2.params, 2 * 1000);
  EXPECT_EQ(s2.gradients, 2 * 250);
  EXPECT_EQ(s2.master_weights, 4 * 250);
  EXPECT_EQ(s2.optimizer_states, 8 * 250);
  // Ψ/N rounds up: 1001 / 4 -> 251.
  EXPECT_EQ(estimate_model_states_mem_needs_paper(1001, 4, 3).total(), 16 * 251);
}

// Runs `fn`, expecting a deepspeed::Error whose message names `what`.
template <typename Fn>
void expect_error_naming(Fn fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "no deepspeed::Error thrown; expected one naming " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(MemoryEstimator, BadArgumentsNameTheArgument) {
  expect_error_naming([] { estimate_model_states_mem_needs(1000, 0, 1, kBf16); }, "num_ranks");
  expect_error_naming([] { estimate_model_states_mem_needs(1000, 4, 4, kBf16); }, "stage");
  expect_error_naming([] { estimate_model_states_mem_needs(1000, 4, -1, kBf16); }, "stage");
  expect_error_naming([] { estimate_model_states_mem_needs(0, 4, 1, kBf16); }, "num_params");
  expect_error_naming([] { estimate_model_states_mem_needs(1000, 4, 0, kBf16, kCpu); },
                      "offload_optimizer");
  expect_error_naming([] { estimate_model_states_mem_needs(1000, 4, 2, kBf16, kCpu, kCpu); },
                      "offload_param");
  expect_error_naming([] { estimate_model_states_mem_needs(1000, 4, 3, kBf16, kNone, kNone, -1); },
                      "largest_layer_params");
  expect_error_naming(
      [] { estimate_model_states_mem_needs(1000, 4, 2, kBf16, kNone, kNone, 0, -1); },
      "reduce_bucket_size");
  // Issue 52: a bucket whose byte count would wrap 64 bits (the config allows any int64) is refused by name.
  expect_error_naming(
      [] { estimate_model_states_mem_needs(1000, 4, 2, kBf16, kNone, kNone, 0, int64_t{1} << 62); },
      "zero_optimization.reduce_bucket_size");
  expect_error_naming(
      [] { estimate_model_states_mem_needs(1000, 4, 3, kBf16, kNone, kNone, int64_t{1} << 62); },
      "largest_layer_params");
  expect_error_naming([] { estimate_model_states_mem_needs_paper(1000, 0, 1); }, "num_ranks");
  expect_error_naming([] { padded_numel(10, 0); }, "world_size");
  expect_error_naming([] { flat_numel({4, -1}); }, "param_numels[1]");
  EstimateTableOptions options;
  options.num_nodes = 3;
  expect_error_naming([&] { format_memory_estimates(1000, 4, options); }, "num_nodes");
}

TEST(MemoryEstimator, FlatAndPaddedNumel) {
  // 1 -> [0, 16), 16 -> [16, 32), 17 -> [32, 49) rounded up to 64.
  EXPECT_EQ(flat_numel({1, 16, 17}), 64);
  EXPECT_EQ(flat_numel({}), 0);
  EXPECT_EQ(padded_numel(1001, 4), 1004);
  EXPECT_EQ(padded_numel(1000, 4), 1000);
  EXPECT_EQ(padded_numel(5, 1), 5);
}

TEST(MemoryEstimator, FormatBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");       // 1.5 x 1024
  EXPECT_EQ(format_bytes(18000000), "17.17 MiB");  // 18e6 / 2^20 = 17.166
  EXPECT_EQ(format_bytes(3LL * 1024 * 1024 * 1024), "3.00 GiB");
}

TEST(MemoryEstimator, TableHasOneRowPerStage) {
  // Ψ = 1e6, N = 4, bf16: stage 0 device 18 x 1e6 bytes = 17.17 MiB, stage 3 18 x 250000 = 4.29
  // MiB.
  std::string table = format_memory_estimates(1000000, 4);
  EXPECT_NE(table.find("17.17 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("4.29 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("world size 4"), std::string::npos) << table;
  EXPECT_EQ(table.find("offload_param"), std::string::npos) << table;

  // With CPU offload a fifth row offloads the stage-3 parameters too; host per node = 2 ranks x
  // per-rank bytes.
  EstimateTableOptions options;
  options.offload_optimizer = kCpu;
  options.num_nodes = 2;
  table = format_memory_estimates(1000000, 4, options);
  EXPECT_NE(table.find("offload_param=cpu"), std::string::npos) << table;
  EXPECT_NE(table.find("2 rank(s) per node"), std::string::npos) << table;
  // Stage 3 with both offloaded: host holds (2+4+4+8) x 250000 = 4.5e6 bytes per rank, 9e6 per node
  // = 8.58 MiB.
  EXPECT_NE(table.find("8.58 MiB"), std::string::npos) << table;
}

}  // namespace
}  // namespace deepspeed::zero
