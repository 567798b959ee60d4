// See supervisor.h.
#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "deepspeed/error.h"
#include "launcher/rank_output.h"

extern char** environ;

namespace deepspeed::launcher {
namespace {

// After every child has exited, how long stray writers holding a pipe (a rank's daemonized child)
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

struct Child {
  const ChildSpec* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  // Read ends of the stdout and stderr pipes; -1 once at EOF (or when logging to a file).
  int fds[2] = {-1, -1};
  int stdin_fd = -1;  // write end of the child's stdin pipe, held open until it ends
  std::unique_ptr<RankOutput> outputs[2];
};

// Blocks the supervised signals for the lifetime of supervise() (a signalfd reads them instead) and
// ignores SIGPIPE so a closed stdout cannot kill the supervisor; restores both on exit.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&handled_);
    sigaddset(&handled_, SIGCHLD);
    // SIGINT and SIGTERM are always handled, as DeepSpeed's launcher does: a launcher started in
    // the background of a script (`cmd &`) inherits SIGINT ignored, yet `kill -INT` must stop the
    // job. Only SIGHUP keeps an ignored disposition (nohup). A blocked signal reaches the signalfd
    // even when its disposition is SIG_IGN, so blocking it is enough.
    sigaddset(&handled_, SIGINT);
    sigaddset(&handled_, SIGTERM);
    struct sigaction hup = {};
    ::sigaction(SIGHUP, nullptr, &hup);
    if (hup.sa_handler != SIG_IGN) sigaddset(&handled_, SIGHUP);
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

class Supervisor {
 public:
  Supervisor(const std::vector<ChildSpec>& specs, const SuperviseOptions& options,
             const SignalScope& signals)
      : specs_(specs), options_(options), signals_(signals) {}

  int run() {
    children_.resize(specs_.size());
    for (size_t i = 0; i < specs_.size(); ++i) {
      children_[i].spec = &specs_[i];
      if (!spawn(children_[i])) {
        begin_stop(SIGTERM);
        exit_code_ = 1;
        break;
      }
    }
    loop();
    return exit_code_;
  }

 private:
  // Starts one child; false (after saying why) when the system refuses (pipes, fork, log file).
  bool spawn(Child& c) {
    const ChildSpec& spec = *c.spec;
    CStrings argv(spec.argv);
    CStrings envp(spec.env);

    int out_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    int in_pipe[2] = {-1, -1};
    int log_fd = -1;
    auto close_all = [&] {
      for (int fd :
           {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], in_pipe[0], in_pipe[1], log_fd}) {
        if (fd >= 0) ::close(fd);
      }
    };
    if (!spec.log_file.empty()) {
      log_fd = ::open(spec.log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (log_fd < 0) {
        say("cannot open log " + spec.log_file + " for " + spec.label + ": " +
            std::strerror(errno));
        return false;
      }
    } else if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      say("cannot create pipes for the output of " + spec.label + ": " + std::strerror(errno));
      close_all();
      return false;
    }
    if (spec.stdin_pipe && ::pipe2(in_pipe, O_CLOEXEC) != 0) {
      say("cannot create a stdin pipe for " + spec.label + ": " + std::strerror(errno));
      close_all();
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
      // The launcher forwards SIGINT/SIGTERM to stop a rank, so a rank must not inherit them
      // ignored from a background launcher (it would run on until the grace period's SIGKILL).
      // The launcher installs no handlers, so the default is all a rank could have inherited.
      struct sigaction dfl = {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      ::sigprocmask(SIG_SETMASK, &signals_.old_mask(), nullptr);
      const int in_fd = in_pipe[0] >= 0 ? in_pipe[0] : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
      ::dup2(log_fd >= 0 ? log_fd : out_pipe[1], STDOUT_FILENO);
      ::dup2(log_fd >= 0 ? log_fd : err_pipe[1], STDERR_FILENO);
      if (!spec.cores.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int core : spec.cores) CPU_SET(core, &set);
        ::sched_setaffinity(0, sizeof(set), &set);
      }
      ::execve(spec.program.c_str(), argv.get(), envp.get());
      const std::string msg =
          "deepspeed: cannot execute " + spec.program + ": " + std::strerror(errno) + "\n";
      write_all(STDERR_FILENO, msg.data(), msg.size());
      ::_exit(127);
    }
    const int fork_errno = errno;
    for (int* fd : {&out_pipe[1], &err_pipe[1], &in_pipe[0], &log_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
    if (pid < 0) {
      close_all();
      say(std::string("fork failed: ") + std::strerror(fork_errno));
      return false;
    }
    ::setpgid(pid, pid);  // also here, so the group exists before we may signal it
    c.pid = pid;
    c.running = true;
    c.stdin_fd = in_pipe[1];
    ++running_;
    if (out_pipe[0] >= 0) {
      c.fds[0] = out_pipe[0];
      c.fds[1] = err_pipe[0];
      c.outputs[0] = std::make_unique<RankOutput>(spec.output_prefix, STDOUT_FILENO);
      c.outputs[1] = std::make_unique<RankOutput>(spec.output_prefix, STDERR_FILENO);
      if (spec.detect_failure) {
        c.outputs[1]->set_line_observer([this, &c](const std::string& line) {
          if (stopping_) return;
          if (std::optional<ReportedFailure> f = c.spec->detect_failure(line)) {
            exit_code_ = f->exit_code;
            say(f->what + "; stopping the job");
            begin_stop(SIGTERM);
          }
        });
      }
    }
    return true;
  }

  void signal_running(int sig) {
    for (Child& c : children_) {
      if (!c.running) continue;
      if (sig != SIGKILL && c.stdin_fd >= 0) {
        // An ssh session is ended by closing its input: the remote launcher stops its ranks and
        // exits, so their last words come through and ssh ends by itself.
        ::close(c.stdin_fd);
        c.stdin_fd = -1;
        continue;
      }
      if (::kill(-c.pid, sig) != 0) ::kill(c.pid, sig);
    }
  }

  void begin_stop(int sig) {
    stopping_ = true;
    stop_signal_ = sig;
    signal_running(sig);
    kill_deadline_ = now_ms() + options_.kill_grace_seconds * 1000;
  }

  std::string others() const {
    return std::to_string(running_) + " other " + options_.children_noun;
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) {
      reap();
      return;
    }
    if (!stopping_) {
      say("received " + signal_name(sig) + "; forwarding it to " + std::to_string(running_) + " " +
          options_.children_noun);
      exit_code_ = 128 + sig;
      begin_stop(options_.forward_signal != 0 ? options_.forward_signal : sig);
    } else if (running_ > 0) {
      say("received " + signal_name(sig) + " again; killing " + std::to_string(running_) + " " +
          options_.children_noun);
      signal_running(SIGKILL);
      kill_deadline_ = -1;
    }
  }

  void child_ended(Child& c) {
    c.running = false;
    --running_;
    if (c.stdin_fd >= 0) ::close(c.stdin_fd);
    c.stdin_fd = -1;
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Child& c : children_) {
        if (c.pid != pid || !c.running) continue;
        child_ended(c);
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
          say(c.spec->label + " (pid " + std::to_string(pid) + ") " + how +
              (running_ > 0 ? "; stopping " + others()
                            : "; no other " + options_.children_noun + " running"));
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

  // Drains the launcher's stdin; at end-of-file the launcher that started this one is gone.
  void read_stdin() {
    char buf[4096];
    ssize_t got;
    while ((got = ::read(STDIN_FILENO, buf, sizeof(buf))) < 0 && errno == EINTR) {
    }
    if (got > 0 || (got < 0 && errno == EAGAIN)) return;
    watch_stdin_ = false;
    if (stopping_) return;
    say("the launcher that started this node is gone (stdin closed); stopping " +
        std::to_string(running_) + " " + options_.children_noun);
    exit_code_ = 128 + SIGHUP;
    begin_stop(SIGTERM);
  }

  // Reads what is available on one pipe; false at end-of-file.
  bool pump(Child& c, int stream) {
    char buf[65536];
    while (true) {
      const ssize_t got = ::read(c.fds[stream], buf, sizeof(buf));
      if (got > 0) {
        c.outputs[stream]->append(buf, static_cast<size_t>(got));
        if (static_cast<size_t>(got) < sizeof(buf)) return true;
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EAGAIN) return true;
      return false;
    }
  }

  void close_stream(Child& c, int stream) {
    c.outputs[stream]->flush();
    ::close(c.fds[stream]);
    c.fds[stream] = -1;
  }

  void loop() {
    int64_t drain_deadline = -1;
    watch_stdin_ = options_.stop_on_stdin_eof;
    while (true) {
      std::vector<pollfd> pfds;
      std::vector<std::pair<Child*, int>> owners;
      pfds.push_back(pollfd{signals_.fd(), POLLIN, 0});
      owners.emplace_back(nullptr, 0);
      for (Child& c : children_) {
        for (int s = 0; s < 2; ++s) {
          if (c.fds[s] < 0) continue;
          pfds.push_back(pollfd{c.fds[s], POLLIN, 0});
          owners.emplace_back(&c, s);
        }
      }
      const bool open_pipes = pfds.size() > 1;
      const size_t stdin_index = pfds.size();
      if (watch_stdin_) pfds.push_back(pollfd{STDIN_FILENO, POLLIN, 0});
      if (running_ == 0) {
        if (!open_pipes) break;
        if (drain_deadline < 0) {
          // Every child is gone; take down anything left in their process groups (it holds the
          // pipes open).
          for (const Child& c : children_) {
            if (c.pid > 0) ::kill(-c.pid, SIGKILL);
          }
          drain_deadline = now_ms() + kDrainMs;
        }
        if (now_ms() >= drain_deadline) break;
      }
      if (kill_deadline_ >= 0 && now_ms() >= kill_deadline_ && running_ > 0) {
        say(std::to_string(running_) + " " + options_.children_noun + " still running " +
            std::to_string(options_.kill_grace_seconds) + " s after " + signal_name(stop_signal_) +
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
        say(std::string("poll failed: ") + std::strerror(errno) + "; killing " +
            options_.children_noun);
        signal_running(SIGKILL);
        break;
      }
      if (ready <= 0) continue;
      // Output before signals: a child's last lines are printed before the message about its exit.
      for (size_t i = 1; i < stdin_index; ++i) {
        if (pfds[i].revents == 0) continue;
        Child& c = *owners[i].first;
        if (!pump(c, owners[i].second)) close_stream(c, owners[i].second);
      }
      if (watch_stdin_ && pfds[stdin_index].revents != 0) read_stdin();
      if (pfds[0].revents != 0) read_signals();
    }
    // Reap whatever is left (a poll failure, or a child still exiting after SIGKILL).
    while (running_ > 0) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, 0);
      if (pid < 0 && errno != EINTR) break;
      for (Child& c : children_) {
        if (c.pid == pid && c.running) child_ended(c);
      }
    }
    for (Child& c : children_) {
      for (int s = 0; s < 2; ++s) {
        if (c.fds[s] >= 0) close_stream(c, s);
      }
    }
  }

  const std::vector<ChildSpec>& specs_;
  const SuperviseOptions& options_;
  const SignalScope& signals_;
  std::vector<Child> children_;
  int running_ = 0;
  bool stopping_ = false;
  bool watch_stdin_ = false;
  int stop_signal_ = SIGTERM;
  int exit_code_ = 0;
  int64_t kill_deadline_ = -1;
};

}  // namespace

PidFile::PidFile(bool enabled) {
  if (!enabled) return;
  path_ = "/tmp/" + std::to_string(::getpid()) + ".deepspeed";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  DS_CHECK_T(LaunchError, fd >= 0, "--save_pid: cannot create ", path_, ": ", std::strerror(errno));
  const std::string pid = std::to_string(::getpid());
  write_all(fd, pid.data(), pid.size());
  ::close(fd);
  std::printf("launcher pid: %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
}

PidFile::~PidFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  return env;
}

int supervise(const std::vector<ChildSpec>& children, const SuperviseOptions& options) {
  SignalScope signals;
  Supervisor supervisor(children, options, signals);
  return supervisor.run();
}

}  // namespace deepspeed::launcher
