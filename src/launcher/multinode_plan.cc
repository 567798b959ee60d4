// plan_multinode(): DeepSpeed runner.py's multi-node decisions, checked before any host is touched.
#include <unistd.h>

#include <climits>

#include "launcher/launcher.h"
#include "launcher/local_runner.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

std::string this_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  DS_CHECK_T(LaunchError, n > 0, "cannot find the deepspeed executable (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

std::string current_dir() {
  char buf[PATH_MAX];
  DS_CHECK_T(LaunchError, ::getcwd(buf, sizeof(buf)) != nullptr,
             "cannot read the current directory");
  return buf;
}

bool on_path(const std::string& program) {
  try {
    resolve_program(program);
    return true;
  } catch (const LaunchError&) {
    return false;
  }
}

// mpirun and srun start N ranks per host; they cannot place ranks on particular slots.
void check_whole_hosts(const ResourcePool& pool, const std::string& backend) {
  for (const HostSlots& h : pool) {
    for (size_t i = 0; i < h.slots.size(); ++i) {
      DS_CHECK_T(LaunchError, h.slots[i] == static_cast<int>(i), "--launcher ", backend,
                 " starts N ranks per host and cannot use particular slots (host '", h.host,
                 "' selects slots other than 0..", h.slots.size() - 1,
                 "); select whole hosts or use --num_gpus, or use --launcher pdsh/ssh");
    }
  }
}

}  // namespace

MultiNodeLaunch plan_multinode(const LauncherArgs& args,
                               const std::optional<ResourcePool>& hostfile_pool) {
  MultiNodeLaunch m;
  m.backend = args.launcher.empty() ? (on_path("pdsh") ? "pdsh" : "ssh") : args.launcher;
  DS_CHECK_T(
      LaunchError,
      m.backend == "pdsh" || m.backend == "ssh" || m.backend == "openmpi" || m.backend == "slurm",
      "--launcher ", m.backend,
      " is not supported by deepspeed-cpp; use pdsh, ssh, openmpi or slurm");
  m.pool = active_resources(args, hostfile_pool);
  m.master_addr = args.master_addr;
  m.master_port = args.master_port;
  m.launcher_exe = this_executable();
  m.cwd = current_dir();
  m.program = args.user_script;
  m.program_args = args.user_args;
  m.launcher_args = split_shell_words(args.launcher_args, "--launcher_args");
  m.ssh_port = args.ssh_port;
  m.comment = args.comment;
  m.account = args.account;
  m.check_ssh = !args.no_ssh_check;
  m.save_pid = args.save_pid;  // this launcher's pid, on this host
  // A bare program name found on this host's $PATH runs from the same path on every host (as the
  // launcher itself does); a remote non-interactive shell's $PATH is often shorter.
  if (m.program.find('/') == std::string::npos) {
    try {
      m.program = resolve_program(m.program);
    } catch (const LaunchError&) {
      // not here: leave it to the remote hosts' $PATH
    }
  }
  DS_CHECK_T(LaunchError, m.backend == "slurm" || (m.comment.empty() && m.account.empty()),
             "--comment and --account are passed to srun; they need --launcher slurm");

  const bool node_launchers = m.backend == "pdsh" || m.backend == "ssh";
  if (node_launchers) {
    // What each node-local launcher needs to start its ranks as this launcher would.
    if (args.no_local_rank) m.node_flags.push_back("--no_local_rank");
    if (!args.enable_each_rank_log.empty()) {
      m.node_flags.push_back("--enable_each_rank_log=" + args.enable_each_rank_log);
    }
    if (args.bind_cores_to_rank) m.node_flags.push_back("--bind_cores_to_rank");
    if (!args.bind_core_list.empty()) {
      DS_CHECK_T(LaunchError, args.bind_cores_to_rank,
                 "--bind_core_list needs --bind_cores_to_rank");
      m.node_flags.push_back("--bind_core_list=" + args.bind_core_list);
    }
  } else {
    // mpirun/srun start the ranks themselves: no node-local launcher to honour these.
    DS_CHECK_T(LaunchError,
               args.enable_each_rank_log.empty() && !args.bind_cores_to_rank &&
                   args.bind_core_list.empty(),
               "--enable_each_rank_log and --bind_cores_to_rank need --launcher pdsh "
               "or ssh; with ",
               m.backend, " pass the backend's own options through --launcher_args");
    check_whole_hosts(m.pool, m.backend);
  }
  if (m.backend == "slurm") {
    for (const HostSlots& h : m.pool) {
      DS_CHECK_T(LaunchError, h.slots.size() == m.pool[0].slots.size(),
                 "--launcher slurm starts the same number of ranks on every host, but '", h.host,
                 "' has ", h.slots.size(), " slots and '", m.pool[0].host, "' has ",
                 m.pool[0].slots.size(), "; use --num_gpus N");
    }
  }
  return m;
}

}  // namespace deepspeed::launcher
