// DeepSpeed's sequence-length curriculum: data_efficiency.data_sampling.curriculum_learning with the "seqlen"
// metric (or the top-level curriculum_learning of DeepSpeed before 0.19.8, read into it: deepspeed/config.h). Early
// steps train on shorter sequences: each batch is cut to the schedule's length before the forward, as DeepSpeed's
// curriculum tutorial and Megatron-DeepSpeed's "seqlen_truncate" do. The samples and their order stay the loader's.
//
//   auto curriculum = deepspeed::data::SeqlenCurriculum::from_config(engine.config());  // null: none enabled
//   ... each step: if (curriculum) { curriculum->update(engine.global_steps() + 1);
//                                    std::tie(x, y) = curriculum->truncate(x, y); }
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "deepspeed/config.h"

namespace deepspeed::data {

class SeqlenCurriculum {
 public:
  // The config's sequence-length curriculum, or null when none is enabled.
  static std::unique_ptr<SeqlenCurriculum> from_config(const Config& config);
  // A validated schedule (Config validates it).
  explicit SeqlenCurriculum(const config::CurriculumMetricConfig& schedule);

  // The sequence length for global step `step` (1 for the first optimizer step, DeepSpeed's global_steps + 1), as
  // DeepSpeed's CurriculumScheduler.update_difficulty(step) gives it: the schedule's value while the length is below
  // max_difficulty, then max_difficulty for good. Steps may jump forward (a resume): the ones between are replayed,
  // so the state is the uninterrupted run's. DataError for a step before the last one.
  int64_t update(int64_t step);
  int64_t current() const { return current_; }
  // The schedule's value at `step`, without the state (CurriculumScheduler.get_difficulty).
  int64_t difficulty(int64_t step) const;

  // inputs and targets [batch, seq] cut to their first min(seq, current()) positions.
  std::pair<at::Tensor, at::Tensor> truncate(const at::Tensor& inputs, const at::Tensor& targets) const;

 private:
  config::CurriculumMetricConfig schedule_;
  int64_t current_;
  int64_t last_step_ = 0;
};

}  // namespace deepspeed::data
