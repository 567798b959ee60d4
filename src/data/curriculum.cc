// See deepspeed/data/curriculum.h. The schedules are DeepSpeed's (runtime/data_pipeline/curriculum_scheduler.py),
// step for step: tests/data/curriculum_reference.py checks them against it.
#include "deepspeed/data/curriculum.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "deepspeed/error.h"

namespace deepspeed::data {

std::unique_ptr<SeqlenCurriculum> SeqlenCurriculum::from_config(const Config& config) {
  const config::CurriculumMetricConfig* seqlen = config.data_efficiency.seqlen_curriculum();
  return seqlen ? std::make_unique<SeqlenCurriculum>(*seqlen) : nullptr;
}

SeqlenCurriculum::SeqlenCurriculum(const config::CurriculumMetricConfig& schedule)
    : schedule_(schedule), current_(schedule.min_difficulty.value_or(1)) {
  DS_CHECK(schedule_.min_difficulty && schedule_.max_difficulty,
           "SeqlenCurriculum: a schedule without min_difficulty "
           "or max_difficulty (validate it through deepspeed::Config)");
}

int64_t SeqlenCurriculum::difficulty(int64_t step) const {
  const config::CurriculumMetricConfig& s = schedule_;
  const int64_t lo = *s.min_difficulty, hi = *s.max_difficulty;
  if (s.schedule_type == "fixed_discrete") {
    if (step > s.max_step.back()) return s.difficulty.back();
    for (size_t i = 0; i < s.max_step.size(); ++i)
      if (step <= s.max_step[i]) return s.difficulty[i];
    return s.difficulty.back();
  }
  // fixed_linear is fixed_root of degree 1: (step / total)^(1/degree) of the way from min to max, floored, down to
  // a multiple of difficulty_step, at least the first multiple at or above min, at most max.
  const double degree = s.schedule_type == "fixed_root" ? *s.root_degree : 1.0;
  const int64_t unit = *s.difficulty_step;
  const double share =
      std::pow(static_cast<double>(step) / static_cast<double>(*s.total_curriculum_step), 1.0 / degree);
  auto next = static_cast<int64_t>(std::floor(share * static_cast<double>(hi - lo) + static_cast<double>(lo)));
  next -= next % unit;
  next = std::max(next, (lo + unit - 1) / unit * unit);
  return std::min(next, hi);
}

int64_t SeqlenCurriculum::update(int64_t step) {
  DS_CHECK_T(DataError, step >= last_step_, "curriculum: step ", step, " comes after step ", last_step_,
             " (steps only go forward; a resumed run starts a new SeqlenCurriculum)");
  for (int64_t s = last_step_ + 1; s <= step; ++s)
    if (current_ < *schedule_.max_difficulty) current_ = difficulty(s);
  last_step_ = step;
  return current_;
}

std::pair<at::Tensor, at::Tensor> SeqlenCurriculum::truncate(const at::Tensor& inputs,
                                                             const at::Tensor& targets) const {
  const int64_t keep = std::min(current_, inputs.size(1));
  return {inputs.narrow(1, 0, keep), targets.narrow(1, 0, std::min(keep, targets.size(1)))};
}

}  // namespace deepspeed::data
