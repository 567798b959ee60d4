#include "plot/gnuplot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

extern char** environ;

namespace deepspeed::plot {
namespace {

// gnuplot's error output is several lines (the command echoed, a caret, "line N: ...", "system
// error: ..."); joined into one with " | ", runs of spaces squeezed, caret lines dropped, cut at a
// readable length.
std::string one_line(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    std::string squeezed;
    for (char c : line) {
      if (c == ' ' || c == '\t' || c == '\r') {
        if (!squeezed.empty() && squeezed.back() != ' ') squeezed += ' ';
      } else {
        squeezed += c;
      }
    }
    while (!squeezed.empty() && squeezed.back() == ' ') squeezed.pop_back();
    if (squeezed.empty() || squeezed == "^") continue;
    out += (out.empty() ? "" : " | ") + squeezed;
  }
  if (out.size() > 500) out = out.substr(0, 500) + "...";
  return out.empty() ? "(no error output)" : out;
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // gnuplot quit early (EPIPE); its exit status and stderr say why
    done += static_cast<size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

std::string gnuplot_quote(const std::string& text) {
  if (text.find_first_of("\n\r") != std::string::npos) {
    throw PlotError("cannot pass a line break to gnuplot: '" + text + "'");
  }
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string gnuplot_script(const Chart& chart) {
  const std::string size = std::to_string(chart.width) + "," + std::to_string(chart.height);
  std::ostringstream s;
  s << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size " << size
    << " noenhanced } else { set terminal png size " << size << " noenhanced }\n"
    << "set output " << gnuplot_quote(chart.output) << "\n"
    << "set datafile separator comma\n"
    << "set key off\n"
    << "set grid\n"
    << "set format x '%g'\n"
    << "set format y '%g'\n"
    << "set xlabel 'samples'\n"
    << "set multiplot layout " << chart.panels.size() << ",1 title " << gnuplot_quote(chart.title)
    << "\n";
  for (const Panel& p : chart.panels) {
    s << "set title " << gnuplot_quote(p.metric) << "\n"
      << "plot " << gnuplot_quote(p.csv_path) << " skip 1 using 1:2 with lines linewidth 2\n";
  }
  s << "unset multiplot\n"
    << "unset output\n";
  return s.str();
}

void run_gnuplot(const std::string& script) {
  // Writing the script to a gnuplot that already quit must fail with EPIPE, not kill ds_plot.
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw PlotError(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(in[0]);
    ::close(in[1]);
    throw PlotError(std::string("pipe: ") + std::strerror(e));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  // A PNG on a terminal would be garbage; gnuplot writes the image to `set output`, not to stdout.
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  char arg0[] = "gnuplot";
  char* argv[] = {arg0, nullptr};
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(err[0]);
    if (rc == ENOENT) {
      throw PlotError("gnuplot not found on PATH (install it: apt-get install gnuplot-nox)");
    }
    throw PlotError(std::string("cannot start gnuplot: ") + std::strerror(rc));
  }
  // The script is a few KiB, well under a pipe's buffer, so writing it all before reading stderr
  // cannot deadlock.
  write_all(in[1], script);
  ::close(in[1]);
  const std::string errors = read_all(err[0]);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                          : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                : "status " + std::to_string(status);
  throw PlotError("gnuplot failed (" + how + "): " + one_line(errors));
}

}  // namespace deepspeed::plot
