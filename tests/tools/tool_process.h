// Test helper: run a command-line tool to completion as a child process (no shell) and capture its
// exit code, stdout and stderr. Not thread-safe (it waits for its own child only, but shares the
// test's cwd).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ds_test {

struct ToolResult {
  int exit_code =
      -1;  // 128 + signal when killed; -1 when it did not finish within the limit (then killed)
  std::string out;
  std::string err;
};

// Environment changes for run_tool: NAME and its value, or std::nullopt to remove NAME.
using EnvChanges = std::vector<std::pair<std::string, std::optional<std::string>>>;

// Runs `argv` (argv[0] a path) with the test's environment changed by `env`, in the current
// directory, for at most `timeout_s` seconds.
ToolResult run_tool(const std::vector<std::string>& argv, const EnvChanges& env = {},
                    double timeout_s = 120);

// Lines of `text`, without their newlines.
std::vector<std::string> split_lines(const std::string& text);

}  // namespace ds_test
