// What ZeRO saves, in the bytes of live LibTorch tensors (a counting CPU allocator, so every transient counts,
// Gloo's staging included): for each stage, the peak over training steps of this rank's live tensor bytes stays
// under the formula's model states for the stage plus
//   - what a plain LibTorch run of the same model and batch holds beyond its own model states (activations,
//     autograd's temporaries, torch's AdamW step temporaries): measured here, not guessed, and
//   - the stage's working buffers, bounded by the config's bucket sizes (stated per stage below).
// A stage that kept a full-size buffer it should not (a whole fp32 gradient at stage 2, a staged copy of the
// partitions in an all-gather, a pool holding the whole model at stage 3) goes past the bound: the model is large
// enough (Psi = 3.2M) that any such buffer is several MiB, while the slack is what the plain run measures.
// Runs at 2 and 4 ranks, each stage in processes of its own (tests/zero/CMakeLists.txt).
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "deepspeed/comm.h"
#include "tiny_gpt.h"
#include "zero_memory_peak.h"

namespace {

using zero_memory::counter;

using deepspeed::models::GPT;
using deepspeed::models::GPTConfig;

constexpr int kSteps = 3;
constexpr int64_t kMicro = 2;
// reduce_bucket_size and allgather_bucket_size (elements), and stage 3's live bound in blocks.
constexpr int64_t kBucket = 50000;
constexpr int64_t kLiveBlocks = 2;
// Flat buffers are padded to a multiple of the world size per group, and a step keeps a few scalars (the loss,
// step counters, norms): far below any full-size buffer.
constexpr int64_t kSmallBytes = 256 * 1024;
// stage 2: staging buffers alive at once (grad_reducer.cc kMaxLiveStaging).
constexpr int64_t kStagingBuffers = 4;
// stage 3: gradient blocks held at once beyond the gathered ones: one unit's gradient buffer or its reduction in
// flight (kBucket is smaller than a block, so a reduction finishes before the next unit's buffer is taken:
// stage3_grads.cc arm_grads). A schedule that took the next buffer with the reduction still in flight holds two.
constexpr int64_t kGradientBlocks = 1;

GPTConfig model_config(bool units) {
  GPTConfig c;
  c.vocab_size = 256;
  c.seq_len = 16;
  c.layers = 4;
  c.hidden = 256;
  c.heads = 4;
  c.bias = false;
  c.shard_blocks = units;
  return c;
}

std::string config_json(int stage) {
  const GPTConfig c = model_config(true);
  std::string zero = "{\"stage\": " + std::to_string(stage) + ", \"reduce_bucket_size\": " + std::to_string(kBucket) +
                     ", \"allgather_bucket_size\": " + std::to_string(kBucket) + ", \"overlap_comm\": true";
  const int64_t block = tiny_gpt::block_elements(c);
  if (stage == 3)
    zero += ", \"stage3_max_live_parameters\": " + std::to_string(kLiveBlocks * block) +
            ", \"stage3_prefetch_bucket_size\": " + std::to_string(block) +
            ", \"stage3_param_persistence_threshold\": 1000, \"stage3_max_reuse_distance\": 0";
  return "{\"train_micro_batch_size_per_gpu\": " + std::to_string(kMicro) +
         ", \"steps_per_print\": 1000, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}"
         ", \"zero_optimization\": " + zero + "}}";
}

// Peak live bytes over the training steps of a plain LibTorch run (no engine), minus its own model states:
// parameters, gradients and AdamW's two moments, 16 bytes a parameter.
int64_t plain_overhead(const at::Tensor& data, int64_t* psi) {
  const int64_t base = counter().live();
  int64_t peak = 0;
  {
    GPT model = tiny_gpt::make_model(model_config(false));
    *psi = 0;
    for (const auto& p : model->parameters()) *psi += p.numel();
    torch::optim::AdamW adamw(model->parameters(), torch::optim::AdamWOptions(1e-3));
    counter().reset_peak();
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x, y;
      tiny_gpt::split_batch(data, {2 * step, 2 * step + 1}, &x, &y);
      adamw.zero_grad(/*set_to_none=*/false);
      model->forward(x, y).backward();
      adamw.step();
    }
    peak = counter().peak() - base;
  }
  return peak - 16 * *psi;
}

// Peak live bytes over the training steps of `stage`, above `base` (the bytes live before the model was built).
int64_t stage_peak(int stage, const at::Tensor& data, int64_t base) {
  return zero_memory::stage_peak(config_json(stage), model_config(stage == 3), data, base, kSteps);
}

void expect_peak_within_bound(int stage) {
  // One engine per process: c10d's Gloo worker threads drop their references to a finished collective's tensors a
  // moment after wait() returns, so a previous engine's buffers could still be freed while this one is measured
  // (making its peak look smaller). ctest runs each stage in a process of its own (tests/zero/CMakeLists.txt).
  static bool engine_ran = false;
  ASSERT_FALSE(engine_ran) << "run one ZeroMemory test per process (--gtest_filter=ZeroMemory.Stage<k>*)";
  engine_ran = true;
  tiny_gpt::ensure_comm();
  const int n = deepspeed::comm::get_world_size();
  CountingAllocator::Scope scope(&counter());
  const GPTConfig c = model_config(true);
  const at::Tensor data = tiny_gpt::dataset(c);
  int64_t psi = 0;
  const int64_t base = counter().live();
  const int64_t overhead = std::max<int64_t>(0, plain_overhead(data, &psi));
  const int64_t block = tiny_gpt::block_elements(c);
  const int64_t outside_blocks = psi - c.layers * block;  // stage 3's root and persistent parameters
  const int64_t largest_param = c.hidden * 4 * c.hidden;    // the MLP's matrices
  // Model states per rank (fp32 Adam): parameters 4, gradients 4, moments 8 bytes a parameter; stage 1 partitions
  // the moments, stage 2 the gradients too, stage 3 the parameters too.
  const double params = stage == 3 ? 4.0 / n : 4.0;
  const double grads = stage >= 2 ? 4.0 / n : 4.0;
  const double moments = stage >= 1 ? 8.0 / n : 8.0;
  const auto states = static_cast<int64_t>((params + grads + moments) * static_cast<double>(psi));
  // Working buffers the bucket sizes bound. Stages 0 and 1 reduce and publish in place (none). Stage 2: the staging
  // buckets alive at once (a bucket closes at the first parameter that fills it, so it may exceed the bucket size
  // by up to one parameter) and the gradient autograd makes before the hook moves it. Stage 3: the gathered blocks
  // (the live bound), the gradient block above with the gradient autograd hands over when a unit's buffer is
  // taken (copied into it, then dropped), and the root and persistent parameters with their gradients.
  int64_t working = 0;
  if (stage == 2) working = (kStagingBuffers * (kBucket + largest_param) + largest_param) * 4;
  if (stage == 3) working = ((kLiveBlocks + kGradientBlocks) * block + largest_param + 2 * outside_blocks) * 4;
  const int64_t bound = states + overhead + working + kSmallBytes;
  const int64_t peak = stage_peak(stage, data, base);
  if (deepspeed::comm::get_rank() == 0)
    std::printf("stage %d at %d ranks: peak %.2f MiB, bound %.2f MiB (states %.2f, plain run's overhead %.2f, "
                "working %.2f)\n",
                stage, n, peak / 1048576.0, bound / 1048576.0, states / 1048576.0, overhead / 1048576.0,
                working / 1048576.0);
  EXPECT_LE(peak, bound) << "stage " << stage << " at " << n << " ranks";
}

TEST(ZeroMemory, Stage0PeakStaysUnderItsFormulaPlusBucketBoundedBuffers) { expect_peak_within_bound(0); }
TEST(ZeroMemory, Stage1PeakStaysUnderItsFormulaPlusBucketBoundedBuffers) { expect_peak_within_bound(1); }
TEST(ZeroMemory, Stage2PeakStaysUnderItsFormulaPlusBucketBoundedBuffers) { expect_peak_within_bound(2); }
TEST(ZeroMemory, Stage3PeakStaysUnderItsFormulaPlusBucketBoundedBuffers) { expect_peak_within_bound(3); }

}  // namespace
