// Short helper commands the multi-node runner runs before the job (ssh reachability checks, the
// master address lookup), side by side, with their output captured. Not for the job itself
// (supervisor.h). Not thread-safe (forks).
#pragma once

#include <string>
#include <vector>

namespace deepspeed::launcher {

struct CommandResult {
  int exit_code = -1;  // 128+signal when killed; -1 when it could not start
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Starts every argv at once (argv[0] looked up on $PATH, stdin /dev/null, each its own process
// group) and waits until all have ended; those still running after `timeout_s` are killed and
// marked timed_out.
std::vector<CommandResult> run_commands(const std::vector<std::vector<std::string>>& argvs,
                                        double timeout_s);

// The last non-empty line of `text`, trimmed ("" when none): the useful part of ssh's stderr.
std::string last_line(const std::string& text);

}  // namespace deepspeed::launcher
