// Parses DeepSpeed's runner flags with CLI11. Everything from the program name on belongs to the
// program, so the parser stops at the first positional argument (CLI11's prefix_command mode), as
// argparse.REMAINDER does.
#include "launcher/launcher_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>

namespace deepspeed::launcher {
namespace {

// Flags DeepSpeed has that deepspeed-cpp rejects, with the reason shown to the user.
struct Rejected {
  bool module = false;
  bool no_python = false;
  bool elastic_training = false;
  int min_elastic_nodes = -1;
  int max_elastic_nodes = -1;
};

void add_options(CLI::App& app, LauncherArgs& a, Rejected& r) {
  app.add_option("-H,--hostfile", a.hostfile,
                 "Hostfile (MPI style, e.g. 'worker-0 slots=4') defining the resource pool")
      ->capture_default_str();
  app.add_option("-i,--include", a.include,
                 "Resources to use: NODE_SPEC[@NODE_SPEC ...], NODE_SPEC=NAME[:SLOT[,SLOT ...]]");
  app.add_option("-e,--exclude", a.exclude,
                 "Resources NOT to use; same syntax as --include, exclusive with it");
  app.add_option("--num_nodes", a.num_nodes,
                 "Number of hosts to run on (the first N of the hostfile)")
      ->capture_default_str();
  app.add_option("--num_gpus,--num_accelerators,--num_procs", a.num_gpus,
                 "Processes per node (slots 0..N-1 of every host; on CPU, simply N ranks)")
      ->capture_default_str();
  app.add_option("--master_port", a.master_port, "Rendezvous port of rank 0")
      ->capture_default_str();
  app.add_option("--master_addr", a.master_addr,
                 "Address of node 0 (default 127.0.0.1 on one node)");
  app.add_option("--node_rank", a.node_rank, "This node's index in [0, num_nodes), with --no_ssh")
      ->capture_default_str();
  app.add_option("--launcher", a.launcher,
                 "Multi-node backend: pdsh (default when installed), ssh, openmpi, slurm")
      ->transform(CLI::IsMember({"pdsh", "ssh", "openmpi", "mvapich", "slurm", "mpich", "impi"},
                                CLI::ignore_case));
  app.add_option("--launcher_args", a.launcher_args,
                 "Extra arguments for the multi-node backend (pdsh, ssh, mpirun or srun), one "
                 "shell-quoted string");
  app.add_option("--ssh_port", a.ssh_port, "SSH port for remote hosts (default: ssh's own)");
  app.add_option("--comment", a.comment, "Comment passed to srun (slurm launcher)");
  app.add_option("--account", a.account, "Account passed to srun (slurm launcher)");
  app.add_flag("--no_ssh", a.no_ssh, "Run this node's ranks without ssh (use with --node_rank)");
  app.add_flag("--no_ssh_check", a.no_ssh_check, "Skip the passwordless-ssh check (multi-node)");
  app.add_option("--autotuning", a.autotuning,
                 "Tune the program's DeepSpeed config first (tune), and then train with the best "
                 "one (run); see the config's autotuning section")
      ->check(CLI::IsMember({"tune", "run"}));
  app.add_flag("--force_multi", a.force_multi,
               "Use the multi-node runner even when the run fits on this host");
  // Set by the multi-node runners on the node-local launchers they start; not for users.
  app.add_option("--world_info", a.world_info, "(internal) base64 resource pool of the job")
      ->group("");
  app.add_flag("--stop_on_stdin_eof", a.stop_on_stdin_eof,
               "(internal) stop the ranks when stdin closes")
      ->group("");
  app.add_flag("--no_local_rank", a.no_local_rank,
               "Do not pass --local_rank=N as the program's first argument");
  app.add_flag("--save_pid", a.save_pid,
               "Write the launcher's pid to /tmp/<pid>.deepspeed while running");
  app.add_option("--enable_each_rank_log", a.enable_each_rank_log,
                 "Write each rank's stdout+stderr to DIR/<timestamp>_rank<N>.log");
  app.add_flag("--bind_cores_to_rank", a.bind_cores_to_rank,
               "Bind each rank to its own share of the cores; sets OMP_NUM_THREADS");
  app.add_option("--bind_core_list", a.bind_core_list, "Cores to share out, e.g. 1,3-5,7");

  app.add_flag("--module", r.module, "(Python only; rejected)")->group("");
  app.add_flag("--no_python", r.no_python, "(Python only; rejected)")->group("");
  app.add_flag("--elastic_training", r.elastic_training, "(not supported yet)")->group("");
  app.add_option("--min_elastic_nodes", r.min_elastic_nodes, "(not supported yet)")->group("");
  app.add_option("--max_elastic_nodes", r.max_elastic_nodes, "(not supported yet)")->group("");

}

void reject_unsupported(const Rejected& r) {
  DS_CHECK_T(
      UsageError, !r.module,
      "--module is Python-only: deepspeed-cpp runs the program as an executable; pass its path");
  DS_CHECK_T(
      UsageError, !r.no_python,
      "--no_python is Python-only: deepspeed-cpp always runs the program directly; drop the flag");
  DS_CHECK_T(UsageError,
             !r.elastic_training && r.min_elastic_nodes == -1 && r.max_elastic_nodes == -1,
             "elastic training (--elastic_training, --min/max_elastic_nodes) is not supported yet");
}

}  // namespace

LauncherArgs parse_args(const std::vector<std::string>& argv) {
  LauncherArgs a;
  Rejected r;
  CLI::App app{
      "DeepSpeed runner: launch a program as ranks on this node or across the hostfile's hosts.",
      "deepspeed"};
  app.prefix_command();
  add_options(app, a, r);
  app.footer("Usage: deepspeed [options] program [args...]; everything after program goes to it.");

  // CLI11 consumes a reversed argument vector without the program name.
  std::vector<std::string> reversed;
  for (size_t i = argv.size(); i > 1; --i) reversed.push_back(argv[i - 1]);
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::CallForAllHelp&) {
    throw HelpRequested(app.help("", CLI::AppFormatMode::All));
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  std::vector<std::string> rest = app.remaining();
  DS_CHECK_T(UsageError, !rest.empty(),
             "missing the program to launch; usage: deepspeed [options] program [args...]");
  DS_CHECK_T(UsageError, rest[0].size() < 2 || rest[0][0] != '-', "unrecognized argument '",
             rest[0], "' (see deepspeed --help)");
  reject_unsupported(r);
  a.user_script = rest[0];
  a.user_args.assign(rest.begin() + 1, rest.end());

  std::transform(a.launcher.begin(), a.launcher.end(), a.launcher.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (a.enable_each_rank_log == "None") a.enable_each_rank_log.clear();  // DeepSpeed's "off" value
  DS_CHECK_T(UsageError, a.ssh_port == -1 || (a.ssh_port > 0 && a.ssh_port < 65536),
             "--ssh_port must be in [1, 65535], got ", a.ssh_port);
  DS_CHECK_T(UsageError, a.master_port > 0 && a.master_port < 65536,
             "--master_port must be in [1, 65535], got ", a.master_port);
  DS_CHECK_T(UsageError, !a.user_script.empty(), "the program to launch is an empty string");
  return a;
}

}  // namespace deepspeed::launcher
