// run_multinode(): the checks that need the hosts, then the backend under the supervisor.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launcher/launcher.h"
#include "launcher/exports.h"
#include "launcher/job_id.h"
#include "launcher/local_runner.h"
#include "launcher/subprocess.h"
#include "launcher/supervisor.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

constexpr double kSshCheckSeconds = 30;

std::vector<std::string> ssh_prefix(const MultiNodeLaunch& m) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"};
  if (m.ssh_port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(m.ssh_port));
  }
  // With the ssh backend, --launcher_args are ssh's own options: the checks must use them too.
  if (m.backend == "ssh") argv.insert(argv.end(), m.launcher_args.begin(), m.launcher_args.end());
  return argv;
}

std::string describe_failure(const CommandResult& r) {
  if (r.timed_out) return "no answer within " + std::to_string(int(kSshCheckSeconds)) + " s";
  const std::string why = last_line(r.err);
  return "ssh exited with status " + std::to_string(r.exit_code) + (why.empty() ? "" : ": " + why);
}

// DeepSpeed checks passwordless ssh to the first host; every host is checked here, side by side.
void check_hosts_reachable(const MultiNodeLaunch& m) {
  std::vector<std::vector<std::string>> checks;
  for (const HostSlots& h : m.pool) {
    std::vector<std::string> argv = ssh_prefix(m);
    argv.push_back(h.host);
    argv.push_back("true");
    checks.push_back(argv);
  }
  const std::vector<CommandResult> results = run_commands(checks, kSshCheckSeconds);
  for (size_t i = 0; i < results.size(); ++i) {
    DS_CHECK_T(LaunchError, results[i].exit_code == 0, "host '", m.pool[i].host,
               "' is not reachable over ssh (", describe_failure(results[i]),
               "); set up passwordless ssh to it, or pass --no_ssh_check to skip this check");
  }
}

bool is_ip_address(const std::string& s) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

// DeepSpeed's rule: the first address `hostname -I` prints on the first host, so that a name that
// only ssh knows (a ~/.ssh/config alias) still gives the ranks an address to meet at.
std::string resolve_master_addr(const MultiNodeLaunch& m) {
  if (m.backend == "slurm") return m.pool[0].host;
  std::vector<std::string> argv = ssh_prefix(m);
  argv.push_back(m.pool[0].host);
  argv.push_back("hostname -I");
  const CommandResult r = run_commands({argv}, kSshCheckSeconds)[0];
  const std::vector<std::string> addrs = split_whitespace(r.out);
  std::string why = r.exit_code != 0 ? describe_failure(r) : addrs.empty() ? "no address" : "";
  if (why.empty() && !is_ip_address(addrs[0])) why = "'" + addrs[0] + "' is not an IP address";
  DS_CHECK_T(LaunchError, why.empty(), "cannot learn the address of the first host '",
             m.pool[0].host, "' (`hostname -I` over ssh: ", why, "); pass --master_addr");
  return addrs[0];
}

// pdsh reports a host whose command failed as "pdsh@<me>: <host>: ssh exited with exit code <N>"
// and keeps waiting for the others; that line is the job's failure.
std::optional<ReportedFailure> pdsh_host_failure(const std::string& line) {
  static const std::string kMarker = ": ssh exited with exit code ";
  const size_t at = line.find(kMarker);
  if (line.rfind("pdsh@", 0) != 0 || at == std::string::npos) return std::nullopt;
  const size_t host_start = line.find(": ") + 2;
  int code = 1;
  if (!parse_int(trim(line.substr(at + kMarker.size())), &code) || code == 0) return std::nullopt;
  const std::string host = line.substr(host_start, at - host_start);
  return ReportedFailure{"host " + host + " failed (exit code " + std::to_string(code) + ")", code};
}

// A temporary file holding `text`, removed when the run ends.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/deepspeed_hostfile_XXXXXX";
    const int fd = ::mkstemp(path_.data());
    DS_CHECK_T(LaunchError, fd >= 0, "cannot create ", path_, ": ", std::strerror(errno));
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    DS_CHECK_T(LaunchError, ok, "cannot write ", path_);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string backend_program(const std::string& backend) {
  static const std::pair<const char*, const char*> kPrograms[] = {
      {"pdsh", "pdsh"}, {"ssh", "ssh"}, {"openmpi", "mpirun"}, {"slurm", "srun"}};
  for (const auto& [name, program] : kPrograms) {
    if (backend != name) continue;
    try {
      return resolve_program(program);
    } catch (const LaunchError&) {
      throw LaunchError(std::string("--launcher ") + name + " needs " + program +
                        ", which is not on $PATH");
    }
  }
  throw LaunchError("unknown --launcher " + backend);
}

ChildSpec backend_child(const std::string& label, const std::string& program,
                        std::vector<std::string> argv, std::vector<std::string> env) {
  ChildSpec c;
  c.label = label;
  c.program = program;
  c.argv = std::move(argv);
  c.env = std::move(env);
  return c;
}

// `env` with NAME set to `value`.
void set_entry(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  for (std::string& kv : env) {
    if (kv.rfind(name + "=", 0) == 0) {
      kv = name + "=" + value;
      return;
    }
  }
  env.push_back(name + "=" + value);
}

std::string get_entry(const std::vector<std::string>& env, const std::string& name) {
  for (const std::string& kv : env) {
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  }
  return "";
}

}  // namespace

int run_multinode(MultiNodeLaunch m) {
  const std::string program = backend_program(m.backend);
  if (m.check_ssh && m.backend != "slurm") check_hosts_reachable(m);
  if (m.master_addr.empty()) m.master_addr = resolve_master_addr(m);
  const std::vector<std::string> env = current_environment();
  m.exports = collect_exports(env, env_file_paths());
  if (!m.job_id.empty()) set_env_var(m.exports, kJobIdVar, m.job_id);
  // mpirun gives local ranks a pseudo-terminal, so rank 0 would draw a progress bar into a log.
  if (::isatty(STDOUT_FILENO) != 1 && get_entry(env, "DS_PROGRESS").empty()) {
    set_env_var(m.exports, "DS_PROGRESS", "lines");
  }

  PidFile pid_file(m.save_pid);
  std::fprintf(stderr, "deepspeed: %s run on %zu hosts, %d ranks, master %s:%d\n",
               m.backend.c_str(), m.pool.size(), world_size(m.pool), m.master_addr.c_str(),
               m.master_port);
  SuperviseOptions options;
  options.children_noun = "processes";
  options.forward_signal = SIGTERM;
  std::vector<ChildSpec> children;
  std::optional<TempFile> hostfile;
  if (m.backend == "pdsh") {
    std::vector<std::string> pdsh_env = env;
    set_entry(pdsh_env, "PDSH_RCMD_TYPE", "ssh");
    if (m.ssh_port > 0) {
      const std::string append = get_entry(pdsh_env, "PDSH_SSH_ARGS_APPEND");
      set_entry(pdsh_env, "PDSH_SSH_ARGS_APPEND",
                (append.empty() ? "" : append + " ") + "-p " + std::to_string(m.ssh_port));
    }
    children.push_back(backend_child("pdsh", program, pdsh_argv(m), pdsh_env));
    children.back().detect_failure = pdsh_host_failure;
  } else if (m.backend == "ssh") {
    options.children_noun = "hosts";
    for (size_t i = 0; i < m.pool.size(); ++i) {
      children.push_back(
          backend_child("host " + m.pool[i].host, program, ssh_argv(m, static_cast<int>(i)), env));
      children.back().output_prefix = m.pool[i].host + ": ";
      children.back().stdin_pipe = true;  // its end-of-file stops the remote ranks
    }
  } else if (m.backend == "openmpi") {
    hostfile.emplace(mpi_hostfile(m.pool));
    children.push_back(backend_child("mpirun", program, mpirun_argv(m, hostfile->path()), env));
  } else {
    children.push_back(backend_child("srun", program, srun_argv(m), env));
  }
  return supervise(children, options);
}

}  // namespace deepspeed::launcher
