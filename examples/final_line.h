// The summary line the example training programs end with, which scripts and benchmarks compare runs by.
#pragma once

#include <cstdint>
#include <optional>

namespace examples {

// Rank 0 prints the summary line scripts compare runs by (collective: the peak memory is the largest rank's):
//   final step=<N> loss=<float> params_l2=<sqrt(params_sq)> tokens_per_s=<tokens/seconds> peak_rss_mb=<float>
// `loss` is empty when the run trained no step (resumed at or past --steps): the line then has no loss or throughput
// (there are none to report; it used to print nan and 0) and says why.
void print_final(int64_t step, std::optional<double> loss, double params_sq, double tokens, double seconds);

}  // namespace examples
