// One autotuning trial as a process: a launcher command run to the point where the training run
// has reported its metrics file (runtime/autotuning_probe.h), then stopped. The run keeps training
// after it reports (the library never exits by itself), so the trial ends it: SIGTERM to its
// process group, SIGKILL after a grace period. A run that exits first, or that outlives the
// timeout, is reported as such. Not thread-safe (forks; waits on its own child only).
#pragma once

#include <string>
#include <vector>

namespace deepspeed::autotuning {

struct TrialOutcome {
  enum class Kind { kReported, kExited, kOutOfMemory, kTimeout, kInterrupted } kind = Kind::kExited;
  int signal = 0;      // kInterrupted: what the autotuner received (the trial was stopped)
  std::string report;  // the report file's text (kReported)
  int exit_code = -1;  // 128+signal when killed (kExited, kOutOfMemory)
  std::string detail;  // one line for the results table
};

// Runs argv[0] (a path) with argv, stdout and stderr into `log_path`, until `report_path` exists,
// the process exits, `timeout_s` passes, or the autotuner receives SIGINT/SIGTERM/SIGHUP (then the
// trial is stopped as gracefully as when it reports, and kInterrupted says which signal). Out of
// memory: killed by SIGKILL (the kernel's OOM killer) or a log ending that says "out of memory" /
// "bad_alloc". The trial gets SIGTERM if the autotuner dies.
TrialOutcome run_trial_process(const std::vector<std::string>& argv, const std::string& log_path,
                               const std::string& report_path, double timeout_s);

}  // namespace deepspeed::autotuning
