// ZeRO's stages in the order their names promise, with the config a new user writes: zero_optimization holds only
// the stage, so every bucket is DeepSpeed's default (reduce_bucket_size and allgather_bucket_size 5e8,
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9). Those defaults are larger than this whole model,
// so a stage that allocated a bucket of its configured size, or kept every unit gathered because the live bound
// allows it, would hold more than the stage before it (it did: stage 2 above stage 1 and stage 3 above stage 2, in
// peak resident memory, issue 55). Measured in peak live tensor bytes (a counting CPU allocator: every transient
// counts, Gloo's staging included) over training steps, each stage's engine in turn in one process, at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "deepspeed/comm.h"
#include "tiny_gpt.h"
#include "zero_memory_peak.h"

namespace {

using zero_memory::counter;

using deepspeed::models::GPTConfig;

constexpr int kSteps = 3;

GPTConfig model_config(bool units) {
  GPTConfig c;
  c.vocab_size = 256;
  c.seq_len = 16;
  c.layers = 12;
  c.hidden = 320;  // every matrix above stage3_param_persistence_threshold's default, 1e5 elements
  c.heads = 4;
  c.bias = false;
  c.shard_blocks = units;
  return c;
}

std::string config_json(int stage) {
  return "{\"train_micro_batch_size_per_gpu\": 2, \"steps_per_print\": 1000, "
         "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}, "
         "\"zero_optimization\": {\"stage\": " +
         std::to_string(stage) + "}}";
}

// A finished engine's last tensors may be dropped by Gloo's worker threads a moment after it is gone: wait until
// the live bytes are back where they started, so the next stage's peak is measured from the same floor.
void wait_for_live(int64_t base) {
  for (int i = 0; i < 200 && counter().live() > base; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

int64_t stage_peak(int stage, const at::Tensor& data, int64_t base) {
  return zero_memory::stage_peak(config_json(stage), model_config(stage == 3), data, base, kSteps);
}

TEST(ZeroMemoryOrder, DefaultBucketsKeepEachStageBelowThePreviousOne) {
  tiny_gpt::ensure_comm();
  const int n = deepspeed::comm::get_world_size();
  CountingAllocator::Scope scope(&counter());
  const at::Tensor data = tiny_gpt::dataset(model_config(false));
  const int64_t base = counter().live();
  std::array<int64_t, 4> peak{};
  for (int stage = 0; stage < 4; ++stage) {
    peak[stage] = stage_peak(stage, data, base);
    deepspeed::comm::get_world_group().barrier();
    wait_for_live(base);
    if (deepspeed::comm::get_rank() == 0)
      std::printf("stage %d at %d ranks, default buckets: peak live %.2f MiB\n", stage, n, peak[stage] / 1048576.0);
  }
  for (int stage = 1; stage < 4; ++stage)
    EXPECT_LT(peak[stage], peak[stage - 1]) << "stage " << stage << " at " << n << " ranks holds no less than stage "
                                            << stage - 1 << " with DeepSpeed's default bucket sizes";
}

}  // namespace
