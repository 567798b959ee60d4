// run_local(): this node's ranks as children of the launcher's supervisor (supervisor.h).
#include "launcher/local_runner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "launcher/core_binding.h"
#include "launcher/rank_limit.h"
#include "launcher/rank_output.h"
#include "launcher/supervisor.h"

namespace deepspeed::launcher {
namespace {

std::string log_name_prefix() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y%m%d%H%M%S", &tm);
  return buf;
}

// Creates --enable_each_rank_log's directory; returns the common start of the log file names.
std::string prepare_log_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    struct stat st;
    DS_CHECK_T(LaunchError, errno == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
               "--enable_each_rank_log: cannot use ", dir, " as a log directory");
  }
  return dir + "/" + log_name_prefix();
}

}  // namespace

int run_local(const LocalLaunch& launch) {
  DS_CHECK_T(LaunchError, !launch.slots.empty(), "no ranks to start on this node");
  const std::string program = resolve_program(launch.program);  // bad input: fail before spawning
  check_local_rank_count(static_cast<int>(launch.slots.size()));
  PidFile pid_file(launch.save_pid);
  const std::string log_prefix =
      launch.each_rank_log_dir.empty() ? "" : prepare_log_dir(launch.each_rank_log_dir);

  std::vector<std::string> base_env = current_environment();
  // The ranks' stdout is a pipe to us; tell them when it ends on a terminal, so rank 0 may draw a
  // progress bar (src/runtime/progress.h). Not for per-rank log files, nor when the caller decided
  // already.
  if (log_prefix.empty() && ::isatty(STDOUT_FILENO) == 1 &&
      std::getenv("DS_PROGRESS_TTY") == nullptr) {
    base_env.push_back("DS_PROGRESS_TTY=1");
  }
  const int n = static_cast<int>(launch.slots.size());
  std::vector<ChildSpec> ranks(n);
  for (int i = 0; i < n; ++i) {
    const int rank = launch.first_rank + i;
    ChildSpec& c = ranks[i];
    c.label = "rank " + std::to_string(rank);
    c.program = program;
    c.argv = rank_argv(launch, i);
    c.env = rank_environment(launch, i, base_env);
    if (!launch.bind_cores.empty()) c.cores = cores_for_rank(launch.bind_cores, n, i);
    if (!log_prefix.empty()) c.log_file = log_prefix + "_rank" + std::to_string(rank) + ".log";
    c.output_prefix = rank_prefix(rank);
  }
  SuperviseOptions options;
  options.kill_grace_seconds = launch.kill_grace_seconds;
  options.stop_on_stdin_eof = launch.stop_on_stdin_eof;
  return supervise(ranks, options);
}

}  // namespace deepspeed::launcher
