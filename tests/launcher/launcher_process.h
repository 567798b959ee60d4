// Test helpers: run the real `deepspeed` binary as a child of the test, capture its stdout and
// stderr into files, wait for it with a generous timeout, and check whether recorded pids are still
// alive. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace deepspeed::launcher::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One run of the launcher binary.
class LauncherProcess {
 public:
  // Starts DS_DEEPSPEED_BIN with `args` (not including argv[0]); output goes to files in
  // `work_dir`; stdin is `stdin_fd` when given, else the test's own. SIGINT, SIGTERM and SIGHUP
  // start at their defaults except those in `ignored`, which start ignored (as for a background
  // job, `cmd &`, or under nohup).
  LauncherProcess(const std::vector<std::string>& args, const std::string& work_dir,
                  int stdin_fd = -1, const std::vector<int>& ignored = {});
  ~LauncherProcess();  // SIGKILLs and reaps the launcher if the test left it running

  pid_t pid() const { return pid_; }

  // Waits up to `timeout_s` for exit. Returns true and sets exit_code() (128+signal when killed) if
  // it exited.
  bool wait(double timeout_s);
  int exit_code() const { return exit_code_; }
  std::string out() const;
  std::string err() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::string out_path_;
  std::string err_path_;
};

// Runs the launcher to completion (60 s limit; a hang fails the test with exit code -1).
struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
RunResult run_launcher(const std::vector<std::string>& args);

// Waits up to `timeout_s` until `dir` holds at least `count` files named "<n>.pid"; returns their
// pids.
std::vector<pid_t> wait_for_rank_pids(const std::string& dir, int count, double timeout_s);

// Every pid found in "*.pid" files under dir (rank and child pid files).
std::vector<pid_t> all_recorded_pids(const std::string& dir);

// True while `pid` exists and is not a zombie.
bool process_alive(pid_t pid);

// Waits up to `timeout_s` for every pid to be gone; returns those still alive (empty = success).
std::vector<pid_t> wait_until_gone(const std::vector<pid_t>& pids, double timeout_s);

// Reaps every exited child of the test process (needed after it made itself a subreaper).
void reap_children();

// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting_with(const std::string& text, const std::string& prefix);

int count_lines(const std::string& text);

}  // namespace deepspeed::launcher::testing
