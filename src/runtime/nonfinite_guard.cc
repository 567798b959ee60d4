#include "runtime/nonfinite_guard.h"

#include <cmath>
#include <cstdio>

#include "deepspeed/comm.h"

namespace deepspeed::runtime {

std::unique_ptr<NonFiniteGuard> NonFiniteGuard::for_config(const config::Config& c) {
  if (c.fp16.enabled) return nullptr;  // the loss scaler skips fp16's overflows
  const int stage = c.zero.stage;
  const bool partitioned_step = stage == 1 || stage == 2;  // DeepSpeed's stage-1/2 optimizer and its rules
  const bool guarded = c.bf16.enabled ? !partitioned_step || c.bf16.check_grad_overflow
                                      : stage == 3 || (partitioned_step && c.zero.compute_grad_norm);
  return guarded ? std::make_unique<NonFiniteGuard>() : nullptr;
}

bool NonFiniteGuard::skip(std::optional<double> norm, const std::function<bool()>& scan) {
  const bool bad = norm ? !std::isfinite(*norm) : scan();
  if (!bad) return false;
  ++skipped_;
  if (comm::get_rank() == 0) {
    std::printf("[deepspeed] gradients hold inf or NaN: step skipped (%lld skipped so far), as DeepSpeed skips it\n",
                static_cast<long long>(skipped_));
    std::fflush(stdout);
  }
  return true;
}

}  // namespace deepspeed::runtime
