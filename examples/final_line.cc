// print_final (final_line.h).
#include "final_line.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"

namespace examples {

void print_final(int64_t step, std::optional<double> loss, double params_sq, double tokens, double seconds) {
  auto mem = deepspeed::accelerator::get_accelerator().memory_stats();
  at::Tensor peak = at::tensor({static_cast<double>(mem.peak_allocated_bytes)}, at::kDouble);
  deepspeed::comm::get_world_group().all_reduce(peak, deepspeed::comm::ReduceOp::kMax);
  if (deepspeed::comm::get_rank() != 0) return;
  const double peak_mb = peak.item<double>() / (1024.0 * 1024.0);
  if (loss) {
    std::printf("final step=%lld loss=%.6f params_l2=%.6f tokens_per_s=%.1f peak_rss_mb=%.1f\n",
                static_cast<long long>(step), *loss, std::sqrt(params_sq), tokens / seconds, peak_mb);
  } else {
    std::printf(
        "final step=%lld params_l2=%.6f peak_rss_mb=%.1f (no step trained: resumed at step %lld, at or past "
        "--steps)\n",
        static_cast<long long>(step), std::sqrt(params_sq), peak_mb, static_cast<long long>(step));
  }
  std::fflush(stdout);
}

}  // namespace examples
