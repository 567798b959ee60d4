// `deepspeed --autotuning tune|run [launcher flags] program --deepspeed_config ds.json [args]`:
// DeepSpeed's autotuner driving our launcher. It reads the config's `autotuning` section, learns
// the model's size (autotuning.model_info.num_params, or a short profiling run), builds the search
// space (autotuning.h: ZeRO stages, micro batches, offload; pruned by the memory estimator), and
// runs each candidate the tuner picks as a short real training run through this launcher, with the
// same flags and a generated config under exps_dir/<candidate>/ds_config.json; the engine writes
// the run's metric (runtime's autotuning probe) and the run is stopped. Crashes, out-of-memory and
// timeouts are recorded and the search goes on. Results: results_dir/summary.txt (every trial),
// results_dir/ds_config_optimal.json and results_dir/cmd_optimal.txt; `run` then launches the
// program with the optimal config.
//
// Memory per rank for pruning: $DS_AUTOTUNING_MEMORY_PER_RANK (bytes, K/M/G suffixes) when set,
// else this host's available memory (MemAvailable) divided by its ranks, counting host and device
// as one memory (CPU-only runs). A trial gets $DS_AUTOTUNING_TRIAL_TIMEOUT seconds (default 600)
// to report.
#pragma once

#include <string>
#include <vector>

#include "launcher/launcher.h"

namespace deepspeed::autotuning {

// The launcher's AutotuneCommand: returns the process exit code (1 with a one-line message on
// stderr for bad input, the final run's code for `run`).
int run_autotuner(const launcher::LauncherArgs& args, const std::vector<std::string>& argv);

}  // namespace deepspeed::autotuning
