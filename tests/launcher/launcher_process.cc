// Helpers for the launcher's integration tests.
#include "launcher_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace deepspeed::launcher::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void poll_pause() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/ds_launcher_test.XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) std::abort();
  path_ = templ;
}

TempDir::~TempDir() {
  if (DIR* d = ::opendir(path_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path_.c_str());
}

LauncherProcess::LauncherProcess(const std::vector<std::string>& args, const std::string& work_dir,
                                 int stdin_fd, const std::vector<int>& ignored)
    : out_path_(work_dir + "/launcher.out"), err_path_(work_dir + "/launcher.err") {
  std::vector<std::string> argv_s{DS_DEEPSPEED_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int out_fd = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = ::fork();
  if (pid_ == 0) {
    // As if started from a terminal (a test run as a background job inherits SIGINT ignored),
    // unless the test asks for ignored signals.
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    for (int sig : ignored) ::signal(sig, SIG_IGN);
    if (stdin_fd >= 0) ::dup2(stdin_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  ::close(out_fd);
  ::close(err_fd);
}

LauncherProcess::~LauncherProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

bool LauncherProcess::wait(double timeout_s) {
  if (reaped_) return true;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < timeout_s) {
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    poll_pause();
  }
  return false;
}

std::string LauncherProcess::out() const { return read_file(out_path_); }
std::string LauncherProcess::err() const { return read_file(err_path_); }

RunResult run_launcher(const std::vector<std::string>& args) {
  TempDir dir;
  LauncherProcess p(args, dir.path());
  RunResult r;
  if (p.wait(60)) r.exit_code = p.exit_code();
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::vector<pid_t> wait_for_rank_pids(const std::string& dir, int count, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  do {
    pids.clear();
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name[0] == '.' || !ends_with(name, ".pid") ||
            name.find(".child") != std::string::npos) {
          continue;
        }
        pids.push_back(std::atoi(read_file(dir + "/" + name).c_str()));
      }
      ::closedir(d);
    }
    if (static_cast<int>(pids.size()) >= count) return pids;
    poll_pause();
  } while (seconds_since(t0) < timeout_s);
  return pids;
}

std::vector<pid_t> all_recorded_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name[0] != '.' && ends_with(name, ".pid")) {
        pids.push_back(std::atoi(read_file(dir + "/" + name).c_str()));
      }
    }
    ::closedir(d);
  }
  return pids;
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return false;
  // A zombie still answers kill(pid, 0) until its parent reaps it; it runs nothing.
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

std::vector<pid_t> wait_until_gone(const std::vector<pid_t>& pids, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> alive;
  do {
    reap_children();
    alive.clear();
    for (pid_t p : pids) {
      if (process_alive(p)) alive.push_back(p);
    }
    if (alive.empty()) return alive;
    poll_pause();
  } while (seconds_since(t0) < timeout_s);
  return alive;
}

void reap_children() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

std::vector<std::string> lines_starting_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0) out.push_back(line);
  }
  return out;
}

int count_lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace deepspeed::launcher::testing
