// See trial_process.h.
#include "autotuning/trial_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "deepspeed/error.h"

namespace deepspeed::autotuning {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);
constexpr int kGraceSeconds = 10;

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last `n` bytes of a file: where a run's fatal error is.
std::string read_tail(const std::string& path, std::streamoff n) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in.tellg();
  if (size <= 0) return "";
  in.seekg(std::max<std::streamoff>(0, size - n));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Blocks the signals that should stop the search while a trial runs, so the autotuner can stop the
// trial first; restores the mask after. SIGINT and SIGTERM always stop it, as they stop the
// launcher: one started with them ignored (a background job of a script, `cmd &`) gets their
// default back, so they also end the search between trials. An ignored SIGHUP (nohup) stays so.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&set_);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current = {};
      ::sigaction(sig, nullptr, &current);
      if (current.sa_handler == SIG_IGN && sig != SIGHUP) {
        struct sigaction dfl = {};
        dfl.sa_handler = SIG_DFL;
        ::sigaction(sig, &dfl, nullptr);
        current.sa_handler = SIG_DFL;
      }
      if (current.sa_handler != SIG_IGN) sigaddset(&set_, sig);
    }
    ::sigprocmask(SIG_BLOCK, &set_, &old_);
  }
  ~BlockedSignals() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }
  // A pending signal, or 0.
  int take() {
    timespec zero = {0, 0};
    const int sig = ::sigtimedwait(&set_, nullptr, &zero);
    return sig > 0 ? sig : 0;
  }
  const sigset_t& old_mask() const { return old_; }

 private:
  sigset_t set_;
  sigset_t old_;
};

int decode_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Stops the trial's process group and reaps it; the launcher in it stops its ranks.
void stop(pid_t pid) {
  ::kill(-pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kGraceSeconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

bool says_out_of_memory(const std::string& log) {
  for (const char* needle :
       {"out of memory", "Out of memory", "OutOfMemory", "bad_alloc", "Cannot allocate memory"}) {
    if (log.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TrialOutcome run_trial_process(const std::vector<std::string>& argv, const std::string& log_path,
                               const std::string& report_path, double timeout_s) {
  ::unlink(report_path.c_str());
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DS_CHECK(log_fd >= 0, "cannot write the trial log ", log_path, ": ", std::strerror(errno));
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  BlockedSignals signals;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // SIGTERM: the launcher then stops its ranks (and remote hosts) as on Ctrl-C.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::sigprocmask(SIG_SETMASK, &signals.old_mask(), nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(log_fd);
  DS_CHECK(pid > 0, "fork failed: ", std::strerror(errno));
  ::setpgid(pid, pid);

  TrialOutcome out;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (exists(report_path)) {  // reported (perhaps just before exiting): the trial succeeded
      if (done == 0) stop(pid);
      out.kind = TrialOutcome::Kind::kReported;
      out.report = read_all(report_path);
      return out;
    }
    if (done == pid) {
      out.exit_code = decode_status(status);
      const bool oom = out.exit_code != 0 && (out.exit_code == 128 + SIGKILL ||
                                              says_out_of_memory(read_tail(log_path, 65536)));
      out.kind = oom ? TrialOutcome::Kind::kOutOfMemory : TrialOutcome::Kind::kExited;
      if (out.exit_code == 0) {
        out.detail = "exited (code 0) before reporting its metrics; log: " + log_path;
      } else {
        out.detail = (oom ? "out of memory (exit code " : "exit code ") +
                     std::to_string(out.exit_code) + (oom ? ")" : "") + "; log: " + log_path;
      }
      return out;
    }
    if (const int sig = signals.take()) {
      stop(pid);
      out.kind = TrialOutcome::Kind::kInterrupted;
      out.signal = sig;
      return out;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      stop(pid);
      out.kind = TrialOutcome::Kind::kTimeout;
      out.detail = "no metrics within " + std::to_string(static_cast<int>(timeout_s)) +
                   " s; log: " + log_path;
      return out;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace deepspeed::autotuning
