// DeepSpeed skips an optimizer step whose gradients are not finite outside fp16's loss scaler too, and this
// guard does the same where DeepSpeed does (tests/zero/nonfinite_cases.json, checked against DeepSpeed 0.19 by
// tests/zero/nonfinite_deepspeed.py): bf16 at every stage, except at stages 1-2 with bf16.check_grad_overflow false;
// fp32 at stages 1-3 (at stages 1-2 through the gradient norm, so not with compute_grad_norm false). fp32 at stage 0
// steps on, NaN and all, as DeepSpeed's plain torch optimizer does. fp16 has the loss scaler instead. A skipped step
// moves nothing: no parameter, optimizer state or schedule.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "deepspeed/config.h"

namespace deepspeed::runtime {

class NonFiniteGuard {
 public:
  // Null where DeepSpeed steps on (see above).
  static std::unique_ptr<NonFiniteGuard> for_config(const config::Config& config);

  // True when this step must be skipped: `norm` is the global gradient norm when the step computes it (the same on
  // every rank); otherwise `scan` says whether any rank holds a non-finite gradient. Counts the skip and prints one
  // line on rank 0.
  bool skip(std::optional<double> norm, const std::function<bool()>& scan);

  int64_t skipped_steps() const { return skipped_; }

 private:
  int64_t skipped_ = 0;
};

}  // namespace deepspeed::runtime
