// run_local(): spawns this node's ranks and supervises them until every one has been reaped.
//
// One single-threaded poll loop watches a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and every
// rank's stdout and stderr pipe. Each rank is its own process group, so stopping a rank also stops
// anything it started; each rank has PR_SET_PDEATHSIG=SIGKILL, so a launcher killed with SIGKILL
// takes its ranks with it.
#include "launcher/local_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

#include "launcher/core_binding.h"
#include "launcher/rank_output.h"

extern char** environ;

namespace deepspeed::launcher {
namespace {

// After every rank has exited, how long stray writers holding a pipe (a rank's daemonized child)
// may keep the launcher waiting for end-of-file.
constexpr int kDrainMs = 2000;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void say(const std::string& line) {
  const std::string out = "deepspeed: " + line + "\n";
  write_all(STDERR_FILENO, out.data(), out.size());
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// A C argv/envp that owns its strings, built before fork() so the child only calls exec.
class CStrings {
 public:
  explicit CStrings(std::vector<std::string> strings) : strings_(std::move(strings)) {
    for (std::string& s : strings_) ptrs_.push_back(s.data());
    ptrs_.push_back(nullptr);
  }
  char* const* get() { return ptrs_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> ptrs_;
};

struct Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int fds[2] = {
      -1, -1};  // read ends of the stdout and stderr pipes; -1 once at EOF (or logging to a file)
  std::unique_ptr<RankOutput> outputs[2];
};

// Blocks the supervised signals for the lifetime of run_local() (a signalfd reads them instead) and
// ignores SIGPIPE so a closed stdout cannot kill the supervisor; restores both on exit.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&handled_);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, sig);
    ::sigprocmask(SIG_BLOCK, &handled_, &old_mask_);
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
    fd_ = ::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK);
    DS_CHECK_T(LaunchError, fd_ >= 0, "signalfd failed: ", std::strerror(errno));
  }
  ~SignalScope() {
    if (fd_ >= 0) ::close(fd_);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  int fd() const { return fd_; }
  // What a child must get back before exec.
  const sigset_t& old_mask() const { return old_mask_; }
  const struct sigaction& old_pipe() const { return old_pipe_; }

 private:
  sigset_t handled_;
  sigset_t old_mask_;
  struct sigaction old_pipe_ = {};
  int fd_ = -1;
};

// DeepSpeed's --save_pid file, /tmp/<pid>.deepspeed holding the launcher's pid; removed when the
// run ends.
class PidFile {
 public:
  explicit PidFile(bool enabled) {
    if (!enabled) return;
    path_ = "/tmp/" + std::to_string(::getpid()) + ".deepspeed";
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    DS_CHECK_T(LaunchError, fd >= 0, "--save_pid: cannot create ", path_, ": ",
               std::strerror(errno));
    const std::string pid = std::to_string(::getpid());
    write_all(fd, pid.data(), pid.size());
    ::close(fd);
    std::printf("launcher pid: %d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
  }
  ~PidFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

 private:
  std::string path_;
};

std::string log_name_prefix() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm;
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y%m%d%H%M%S", &tm);
  return buf;
}

class Supervisor {
 public:
  Supervisor(const LocalLaunch& launch, const SignalScope& signals)
      : launch_(launch), signals_(signals) {}

  int run() {
    const std::string program = resolve_program(launch_.program);
    std::string log_prefix;
    if (!launch_.each_rank_log_dir.empty()) {
      const std::string& dir = launch_.each_rank_log_dir;
      if (::mkdir(dir.c_str(), 0755) != 0) {
        struct stat st;
        DS_CHECK_T(LaunchError,
                   errno == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
                   "--enable_each_rank_log: cannot use ", dir, " as a log directory");
      }
      log_prefix = dir + "/" + log_name_prefix();
    }

    const int n = static_cast<int>(launch_.slots.size());
    for (int i = 0; i < n; ++i) {
      ranks_.emplace_back();
      ranks_.back().rank = launch_.first_rank + i;
      ranks_.back().local_rank = i;
    }
    for (Rank& r : ranks_) {
      const std::string log_file =
          log_prefix.empty() ? "" : log_prefix + "_rank" + std::to_string(r.rank) + ".log";
      if (!spawn(r, program, log_file)) {
        begin_stop(SIGTERM);
        exit_code_ = 1;
        break;
      }
    }
    loop();
    return exit_code_;
  }

 private:
  // Starts one rank; false (after saying why) when the system refuses (pipes, fork, log file).
  bool spawn(Rank& r, const std::string& program, const std::string& log_file) {
    std::vector<std::string> base_env;
    for (char** e = environ; *e != nullptr; ++e) base_env.push_back(*e);
    // The ranks' stdout is a pipe to us; tell them when it ends on a terminal, so rank 0 may draw a progress bar
    // (src/runtime/progress.h). Not for per-rank log files, nor when the caller decided already.
    if (log_file.empty() && ::isatty(STDOUT_FILENO) == 1 && std::getenv("DS_PROGRESS_TTY") == nullptr)
      base_env.push_back("DS_PROGRESS_TTY=1");
    CStrings argv(rank_argv(launch_, r.local_rank));
    CStrings envp(rank_environment(launch_, r.local_rank, base_env));
    std::vector<int> cores;
    if (!launch_.bind_cores.empty()) {
      cores = cores_for_rank(launch_.bind_cores, static_cast<int>(ranks_.size()), r.local_rank);
    }

    int out_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    int log_fd = -1;
    if (!log_file.empty()) {
      log_fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log_fd < 0) {
        say("cannot open rank log " + log_file + ": " + std::strerror(errno));
        return false;
      }
    } else if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      say(std::string("cannot create pipes for rank output: ") + std::strerror(errno));
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
        if (fd >= 0) ::close(fd);
      }
      return false;
    }

    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: only system calls from here to exec.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the launcher died before PDEATHSIG was armed
      ::sigaction(SIGPIPE, &signals_.old_pipe(), nullptr);
      ::sigprocmask(SIG_SETMASK, &signals_.old_mask(), nullptr);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
      ::dup2(log_fd >= 0 ? log_fd : out_pipe[1], STDOUT_FILENO);
      ::dup2(log_fd >= 0 ? log_fd : err_pipe[1], STDERR_FILENO);
      if (!cores.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cores) CPU_SET(c, &set);
        ::sched_setaffinity(0, sizeof(set), &set);
      }
      ::execve(program.c_str(), argv.get(), envp.get());
      const std::string msg =
          "deepspeed: cannot execute " + program + ": " + std::strerror(errno) + "\n";
      write_all(STDERR_FILENO, msg.data(), msg.size());
      ::_exit(127);
    }
    const int fork_errno = errno;
    for (int fd : {out_pipe[1], err_pipe[1], log_fd}) {
      if (fd >= 0) ::close(fd);
    }
    if (pid < 0) {
      for (int fd : {out_pipe[0], err_pipe[0]}) {
        if (fd >= 0) ::close(fd);
      }
      say(std::string("fork failed: ") + std::strerror(fork_errno));
      return false;
    }
    ::setpgid(pid, pid);  // also here, so the group exists before we may signal it
    r.pid = pid;
    r.running = true;
    ++running_;
    if (log_fd < 0) {
      r.fds[0] = out_pipe[0];
      r.fds[1] = err_pipe[0];
      r.outputs[0] = std::make_unique<RankOutput>(rank_prefix(r.rank), STDOUT_FILENO);
      r.outputs[1] = std::make_unique<RankOutput>(rank_prefix(r.rank), STDERR_FILENO);
    }
    return true;
  }

  void signal_running(int sig) {
    for (const Rank& r : ranks_) {
      if (!r.running) continue;
      if (::kill(-r.pid, sig) != 0) ::kill(r.pid, sig);
    }
  }

  void begin_stop(int sig) {
    stopping_ = true;
    stop_signal_ = sig;
    signal_running(sig);
    kill_deadline_ = now_ms() + launch_.kill_grace_seconds * 1000;
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) {
      reap();
      return;
    }
    if (!stopping_) {
      say("received " + signal_name(sig) + "; forwarding it to " + std::to_string(running_) +
          " ranks");
      exit_code_ = 128 + sig;
      begin_stop(sig);
    } else if (running_ > 0) {
      say("received " + signal_name(sig) + " again; killing " + std::to_string(running_) +
          " ranks");
      signal_running(SIGKILL);
      kill_deadline_ = -1;
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Rank& r : ranks_) {
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        --running_;
        const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        if (failed && !stopping_) {
          std::string how;
          if (WIFEXITED(status)) {
            exit_code_ = WEXITSTATUS(status);
            how = "exited with status " + std::to_string(exit_code_);
          } else {
            exit_code_ = 128 + WTERMSIG(status);
            how = "was killed by " + signal_name(WTERMSIG(status));
          }
          say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(pid) + ") " + how +
              (running_ > 0 ? "; stopping " + std::to_string(running_) + " other ranks"
                            : "; no other ranks running"));
          begin_stop(SIGTERM);
        }
      }
    }
  }

  void read_signals() {
    signalfd_siginfo info;
    while (::read(signals_.fd(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      on_signal(static_cast<int>(info.ssi_signo));
    }
  }

  // Reads what is available on one pipe; false at end-of-file.
  bool pump(Rank& r, int stream) {
    char buf[65536];
    while (true) {
      const ssize_t got = ::read(r.fds[stream], buf, sizeof(buf));
      if (got > 0) {
        r.outputs[stream]->append(buf, static_cast<size_t>(got));
        if (static_cast<size_t>(got) < sizeof(buf)) return true;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EAGAIN) return true;
      return false;
    }
  }

  void close_stream(Rank& r, int stream) {
    r.outputs[stream]->flush();
    ::close(r.fds[stream]);
    r.fds[stream] = -1;
  }

  void loop() {
    int64_t drain_deadline = -1;
    while (true) {
      std::vector<pollfd> pfds;
      std::vector<std::pair<Rank*, int>> owners;
      pfds.push_back(pollfd{signals_.fd(), POLLIN, 0});
      owners.emplace_back(nullptr, 0);
      for (Rank& r : ranks_) {
        for (int s = 0; s < 2; ++s) {
          if (r.fds[s] < 0) continue;
          pfds.push_back(pollfd{r.fds[s], POLLIN, 0});
          owners.emplace_back(&r, s);
        }
      }
      const bool open_pipes = pfds.size() > 1;
      if (running_ == 0) {
        if (!open_pipes) break;
        if (drain_deadline < 0) {
          // Every rank is gone; take down anything left in their process groups (it holds the pipes
          // open).
          for (const Rank& r : ranks_) {
            if (r.pid > 0) ::kill(-r.pid, SIGKILL);
          }
          drain_deadline = now_ms() + kDrainMs;
        }
        if (now_ms() >= drain_deadline) break;
      }
      if (kill_deadline_ >= 0 && now_ms() >= kill_deadline_ && running_ > 0) {
        say(std::to_string(running_) + " ranks still running " +
            std::to_string(launch_.kill_grace_seconds) + " s after " + signal_name(stop_signal_) +
            "; sending SIGKILL");
        signal_running(SIGKILL);
        kill_deadline_ = -1;
      }

      int64_t timeout = -1;
      for (int64_t deadline : {running_ > 0 ? kill_deadline_ : int64_t{-1}, drain_deadline}) {
        if (deadline < 0) continue;
        const int64_t left = std::max<int64_t>(0, deadline - now_ms());
        timeout = timeout < 0 ? left : std::min(timeout, left);
      }
      const int ready = ::poll(pfds.data(), pfds.size(), static_cast<int>(timeout));
      if (ready < 0 && errno != EINTR) {
        say(std::string("poll failed: ") + std::strerror(errno) + "; killing ranks");
        signal_running(SIGKILL);
        break;
      }
      if (ready <= 0) continue;
      // Output before signals: a rank's last lines are printed before the message about its exit.
      for (size_t i = 1; i < pfds.size(); ++i) {
        if (pfds[i].revents == 0) continue;
        Rank& r = *owners[i].first;
        if (!pump(r, owners[i].second)) close_stream(r, owners[i].second);
      }
      if (pfds[0].revents != 0) read_signals();
    }
    // Reap whatever is left (a poll failure, or a rank still exiting after SIGKILL).
    while (running_ > 0) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, 0);
      if (pid < 0 && errno != EINTR) break;
      for (Rank& r : ranks_) {
        if (r.pid == pid && r.running) {
          r.running = false;
          --running_;
        }
      }
    }
    for (Rank& r : ranks_) {
      for (int s = 0; s < 2; ++s) {
        if (r.fds[s] >= 0) close_stream(r, s);
      }
    }
  }

  const LocalLaunch& launch_;
  const SignalScope& signals_;
  std::vector<Rank> ranks_;
  int running_ = 0;
  bool stopping_ = false;
  int stop_signal_ = SIGTERM;
  int exit_code_ = 0;
  int64_t kill_deadline_ = -1;
};

}  // namespace

int run_local(const LocalLaunch& launch) {
  DS_CHECK_T(LaunchError, !launch.slots.empty(), "no ranks to start on this node");
  resolve_program(launch.program);  // a bad program is bad input: fail before touching signals
  SignalScope signals;
  PidFile pid_file(launch.save_pid);
  Supervisor supervisor(launch, signals);
  return supervisor.run();
}

}  // namespace deepspeed::launcher
