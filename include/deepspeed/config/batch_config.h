// DeepSpeed's batch-size arithmetic:
//   train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp_world_size
// Any two of the three solve the third; with only train_batch_size or only the micro batch given,
// gradient_accumulation_steps is 1 (DeepSpeed's rules). Neither train_batch_size nor the micro
// batch given, inconsistent values, or values that do not divide are ConfigErrors that show the
// arithmetic.
#pragma once

#include <cstdint>
#include <optional>

namespace deepspeed::config {

struct BatchSizes {
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
};

// Unset arguments are solved; set ones must be >= 1. `dp_world_size` must be >= 1.
BatchSizes resolve_batch_sizes(std::optional<int64_t> train_batch_size,
                               std::optional<int64_t> train_micro_batch_size_per_gpu,
                               std::optional<int64_t> gradient_accumulation_steps,
                               int dp_world_size);

}  // namespace deepspeed::config
