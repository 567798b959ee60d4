// See subprocess.h.
#include "launcher/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

struct Running {
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
};

Running start(const std::vector<std::string>& argv, CommandResult& result) {
  Running r;
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    result.err = std::string("cannot create a pipe: ") + std::strerror(errno);
    return r;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    result.err = std::string("cannot create a pipe: ") + std::strerror(errno);
    ::close(out[0]);
    ::close(out[1]);
    return r;
  }
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execvp(args[0], args.data());
    const std::string msg = "cannot execute " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    result.err = std::string("fork failed: ") + std::strerror(errno);
    ::close(out[0]);
    ::close(err[0]);
    return r;
  }
  ::setpgid(pid, pid);
  r.pid = pid;
  r.fds[0] = out[0];
  r.fds[1] = err[0];
  return r;
}

}  // namespace

std::vector<CommandResult> run_commands(const std::vector<std::vector<std::string>>& argvs,
                                        double timeout_s) {
  using Clock = std::chrono::steady_clock;
  std::vector<CommandResult> results(argvs.size());
  std::vector<Running> running(argvs.size());
  std::vector<bool> alive(argvs.size(), false);
  for (size_t i = 0; i < argvs.size(); ++i) {
    running[i] = start(argvs[i], results[i]);
    alive[i] = running[i].pid > 0;
  }
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  // Output still arriving after every command has exited is read for a moment, not waited for: a
  // daemon the command left (ssh's ControlPersist master) may hold the pipes open for minutes.
  std::optional<Clock::time_point> all_exited;
  while (true) {
    for (size_t i = 0; i < running.size(); ++i) {
      int status = 0;
      if (alive[i] && ::waitpid(running[i].pid, &status, WNOHANG) == running[i].pid) {
        alive[i] = false;
        results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    std::vector<pollfd> pfds;
    std::vector<std::pair<size_t, int>> owners;
    for (size_t i = 0; i < running.size(); ++i) {
      for (int s = 0; s < 2; ++s) {
        if (running[i].fds[s] < 0) continue;
        pfds.push_back(pollfd{running[i].fds[s], POLLIN, 0});
        owners.emplace_back(i, s);
      }
    }
    const bool any_alive = std::find(alive.begin(), alive.end(), true) != alive.end();
    if (!any_alive && !all_exited) all_exited = Clock::now();
    if (!any_alive &&
        (pfds.empty() || Clock::now() - *all_exited > std::chrono::milliseconds(200))) {
      break;
    }
    if (Clock::now() >= deadline) {
      for (size_t i = 0; i < running.size(); ++i) {
        if (!alive[i]) continue;
        results[i].timed_out = true;
        ::kill(-running[i].pid, SIGKILL);
        int status = 0;
        ::waitpid(running[i].pid, &status, 0);
        alive[i] = false;
        results[i].exit_code = 128 + SIGKILL;
      }
      break;
    }
    const int ready = ::poll(pfds.data(), pfds.size(), 50);
    if (ready < 0 && errno != EINTR) break;
    for (size_t k = 0; ready > 0 && k < pfds.size(); ++k) {
      if (pfds[k].revents == 0) continue;
      const auto [i, s] = owners[k];
      char buf[4096];
      const ssize_t got = ::read(running[i].fds[s], buf, sizeof(buf));
      if (got > 0) {
        (s == 0 ? results[i].out : results[i].err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(running[i].fds[s]);
        running[i].fds[s] = -1;
      }
    }
  }
  for (size_t i = 0; i < running.size(); ++i) {
    for (int fd : running[i].fds) {
      if (fd >= 0) ::close(fd);
    }
    if (alive[i]) {  // only after a poll failure
      ::kill(-running[i].pid, SIGKILL);
      ::waitpid(running[i].pid, nullptr, 0);
    }
  }
  return results;
}

std::string last_line(const std::string& text) {
  std::vector<std::string> lines = split(text, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const std::string t = trim(*it);
    if (!t.empty()) return t;
  }
  return "";
}

}  // namespace deepspeed::launcher
