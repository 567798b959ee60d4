// Data-parallel sampling: which dataset indices each rank reads at each micro-step.
//
// Every epoch is one permutation of the dataset (seeded by seed and epoch; the same on every rank). Optimizer step
// s of an epoch consumes positions [s*B, (s+1)*B) of it, B = train_batch_size; rank r at micro-step m reads the
// micro-batch at positions s*B + (r*gas + m)*mb ... +mb. So each step's global batch holds the same samples whatever
// the world size, micro-batch size and accumulation steps, and runs of different layouts compare number for number.
// The last partial global batch of an epoch is dropped. Plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

namespace deepspeed {

class DataParallelSampler {
 public:
  // Throws deepspeed::Error when the dataset holds fewer samples than one global batch, or on non-positive sizes.
  DataParallelSampler(int64_t dataset_size, int64_t micro_batch_size, int64_t gradient_accumulation_steps,
                      int dp_rank, int dp_world_size, uint64_t seed, bool shuffle = true);

  // Re-draws the permutation for `epoch` (deterministic in seed and epoch).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t global_batch_size() const { return micro_ * gas_ * world_; }
  // Full global batches in one epoch.
  int64_t steps_per_epoch() const { return size_ / global_batch_size(); }

  // Dataset indices of this rank's micro-batch `micro_step` (0..gas-1) of optimizer step `step` (0-based, may run
  // past one epoch: the sampler moves to the following epochs' permutations by itself).
  std::vector<int64_t> micro_batch(int64_t step, int64_t micro_step);
  // The whole global batch of `step`, in position order (what a single-process reference run would read).
  std::vector<int64_t> global_batch(int64_t step);

 private:
  void ensure_epoch_for(int64_t step);

  int64_t size_, micro_, gas_;
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace deepspeed
