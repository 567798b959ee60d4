// The launcher's process supervisor: starts child processes (local ranks, or the ssh/pdsh/mpirun/
// srun processes of a multi-node run), multiplexes their output line by line with a prefix,
// forwards SIGINT/SIGTERM/SIGHUP, and stops them all when one fails.
//
// One single-threaded poll loop watches a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP), every
// child's stdout and stderr pipe, and optionally the launcher's own stdin. Each child is its own
// process group, so stopping it also stops anything it started; each has PR_SET_PDEATHSIG=SIGKILL,
// so a launcher killed with SIGKILL takes its children with it. Must be called from a
// single-threaded process; not reentrant.
//
// SIGINT and SIGTERM are handled even when the launcher was started with them ignored (a
// background job of a script), and children start with both at their defaults; an ignored SIGHUP
// (nohup) stays ignored, for the launcher and its children.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::launcher {

// A line of a child's stderr that means the job has failed although the child itself runs on
// (pdsh reports a host's failure and waits for the others): what to say, and the exit code.
struct ReportedFailure {
  std::string what;
  int exit_code = 1;
};
using FailureDetector = std::function<std::optional<ReportedFailure>(const std::string& line)>;

struct ChildSpec {
  std::string label;    // in messages: "rank 3", "host node-2", "pdsh"
  std::string program;  // path to execute (already resolved)
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=value
  std::vector<int> cores;        // non-empty: CPU affinity
  std::string log_file;          // non-empty: stdout and stderr go to this file
  std::string output_prefix;     // put before every output line
  // stdin is a pipe the launcher keeps open until the child ends (else /dev/null): ssh forwards its
  // end-of-file to the remote side when the launcher dies, which stops the remote ranks. Stopping
  // such a child closes the pipe (SIGKILL after the grace period if it does not end).
  bool stdin_pipe = false;
  FailureDetector detect_failure;  // applied to stderr lines
};

struct SuperviseOptions {
  std::string children_noun = "ranks";  // "3 other <noun>"
  int kill_grace_seconds = 5;           // SIGTERM -> SIGKILL delay when stopping
  // Non-zero: the signal sent to the children when the launcher receives SIGINT/SIGTERM/SIGHUP
  // (pdsh and srun need SIGTERM: one SIGINT only makes them print their status).
  int forward_signal = 0;
  // Stop the children when the launcher's stdin reaches end-of-file: the node-local launcher of a
  // multi-node run learns so that the head node's launcher is gone.
  bool stop_on_stdin_eof = false;
};

// Runs the children to the end. Returns 0 when all exit 0, else the first failure's exit code
// (128+signal when killed), or 128+signal when the launcher itself was signalled. Waits for every
// child before returning.
int supervise(const std::vector<ChildSpec>& children, const SuperviseOptions& options);

// DeepSpeed's --save_pid file, /tmp/<pid>.deepspeed holding the launcher's pid (also printed);
// removed when the run ends. Does nothing when not enabled.
class PidFile {
 public:
  explicit PidFile(bool enabled);
  ~PidFile();
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;

 private:
  std::string path_;
};

// The environment of this process as NAME=value strings.
std::vector<std::string> current_environment();

}  // namespace deepspeed::launcher
