// DeepSpeed's flops-profiler report as text: the summary ("DeepSpeed Flops Profiler", "Profile
// Summary at step N"), the aggregated profile (top modules by params, MACs and latency at each
// depth) and the detailed module tree.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <string>

#include "deepspeed/profiling/flops_profiler.h"
#include "profiling/module_tree.h"

namespace deepspeed::profiling::detail {

std::string format_report(const ModuleTree& tree, const PrintOptions& options,
                          double recompute_fwd_factor);

}  // namespace deepspeed::profiling::detail
