// Hands each data-parallel rank its micro-batches from a TokenDataset, in the dataset's order (a GPTDataset or
// BlendedDataset is shuffled already), as Megatron's pretraining sampler does: the global batch at consumed_samples C
// is samples [C, C + B) (B = micro * gradient_accumulation_steps * dp_size), and rank r's micro-step m reads
// positions C + (m * dp_size + r) * micro .. + micro. Only C is state: saved with a checkpoint ("consumed_samples" in
// the client state, as Megatron keeps consumed_train_samples), a run resumed at another world size, micro-batch or
// accumulation continues at the exact next sample.
//
//   deepspeed::data::SampleLoader loader(train, engine.train_micro_batch_size_per_gpu(),
//                                        engine.gradient_accumulation_steps(), engine.dp_rank(),
//                                        engine.dp_world_size());
//   for (...) { for (m ...) { at::Tensor batch = loader.micro_batch(m); ... } loader.advance(); }
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "deepspeed/data/token_dataset.h"

namespace deepspeed::data {

class SampleLoader {
 public:
  // DataError when a size is not positive or the rank is not in [0, dp_size).
  SampleLoader(std::shared_ptr<const TokenDataset> dataset, int64_t micro_batch_size,
               int64_t gradient_accumulation_steps, int dp_rank, int dp_size, int64_t consumed_samples = 0);

  int64_t global_batch_size() const { return micro_ * gas_ * dp_size_; }
  int64_t consumed_samples() const { return consumed_; }
  void set_consumed_samples(int64_t consumed);
  // Global batches left in the dataset from consumed_samples.
  int64_t batches_left() const;

  // This rank's micro-batch `micro_step` (0 .. gradient_accumulation_steps - 1) of the global batch at
  // consumed_samples: [micro, sample_length] int64. DataError naming the dataset's size when the batch runs past it.
  at::Tensor micro_batch(int64_t micro_step) const;
  // Dataset positions of that micro-batch.
  int64_t first_position(int64_t micro_step) const;
  // The global batch is done: consumed_samples moves on by global_batch_size().
  void advance() { consumed_ += global_batch_size(); }

 private:
  std::shared_ptr<const TokenDataset> dataset_;
  int64_t micro_, gas_;
  int dp_rank_, dp_size_;
  int64_t consumed_;
};

}  // namespace deepspeed::data
