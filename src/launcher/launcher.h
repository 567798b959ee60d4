// The `deepspeed` launcher: DeepSpeed's command line, hostfile and resource pool, and the local
// spawner.
//
// The flow mirrors DeepSpeed's runner.py + launch.py in one binary:
//   args = parse_args(argv)                  // DeepSpeed's flags and defaults
//   pool = fetch_hostfile(args.hostfile)     // absent file -> local resources only
//   if needs_multinode(args, pool):          // several hosts, or a remote one
//     run_multinode(plan_multinode(args, pool))  // pdsh/ssh start `deepspeed --world_info=...`
//                                                // on every host; mpirun/srun start the ranks
//   else:
//     run_local(plan_launch(args, pool))     // this node's ranks: spawn, prefix output, reap
// `main()` does all of that for tools/deepspeed.cc; the autotuner calls the pieces to run its
// trials.
//
// Nothing here depends on LibTorch or on the engine. Errors in user input (hostfile, flags,
// filters) throw deepspeed::LaunchError with a one-line message naming the file:line, flag or
// value. run_local() and run_multinode() must be called from a single-threaded process (they block
// signals and fork); they are not reentrant.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::launcher {

inline constexpr int kDefaultMasterPort = 29500;             // TORCH_DISTRIBUTED_DEFAULT_PORT
inline constexpr char kDefaultHostfile[] = "/job/hostfile";  // DLTS_HOSTFILE
inline constexpr char kDefaultLauncher[] = "pdsh";  // when pdsh is on $PATH, else ssh
inline constexpr char kLocalMasterAddr[] = "127.0.0.1";

// One host of the resource pool and the slot (device) ids it may use, in ascending order.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
  bool operator==(const HostSlots& o) const { return host == o.host && slots == o.slots; }
};

// Hosts in hostfile order: that order decides which global ranks each host gets.
using ResourcePool = std::vector<HostSlots>;

// ---- hostfile (hostfile.cc) ----

// Parses MPI-style hostfile text: `hostname slots=N` per line, `#` comments (whole-line or
// trailing), blank lines. `source` names the text in errors ("hostfile:3: expected 'hostname
// slots=N', got 'foo'"). Duplicate hosts, an empty file and bad syntax throw LaunchError. Slots of
// a host are 0..N-1.
ResourcePool parse_hostfile(const std::string& text, const std::string& source);

// Reads and parses `path`; std::nullopt when no such file exists (DeepSpeed then runs on local
// resources only).
std::optional<ResourcePool> fetch_hostfile(const std::string& path);

// ---- resource pool (resource_pool.cc) ----

// Parses DeepSpeed's NODE_SPEC[@NODE_SPEC...] with NODE_SPEC = NAME[:SLOT[,SLOT...]]. A host named
// twice has its slots merged; slots come back sorted and unique; a bare NAME has no slots (meaning
// "the whole host").
std::vector<HostSlots> parse_node_config_list(const std::string& spec);

// DeepSpeed's --include/--exclude: include keeps only the named hosts/slots, exclude removes them.
// Both non-empty, an unknown host, or a slot the host does not have throws LaunchError naming it.
// Hosts left with no slots are dropped; the pool's host order is kept.
ResourcePool parse_resource_filter(const ResourcePool& pool, const std::string& include,
                                   const std::string& exclude);

// --num_nodes: the first `num_nodes` hosts. --num_gpus: slots 0..num_gpus-1 on every host
// (DeepSpeed's meaning; on a CPU build that is simply the number of processes per node).
ResourcePool limit_num_nodes(const ResourcePool& pool, int num_nodes);
ResourcePool limit_num_gpus(const ResourcePool& pool, int num_gpus);

// Total slots = world size.
int world_size(const ResourcePool& pool);

// Local "devices" when there is no hostfile, as DeepSpeed's CPU accelerator counts them:
// $LOCAL_SIZE when positive, else the number of NUMA nodes, else 1.
int local_device_count();

// True when `host` names this machine (localhost, 127.0.0.1, ::1, or this host's name, short or
// full).
bool is_local_host(const std::string& host);

// ---- command line (launcher_args.cc) ----

// DeepSpeed runner flags; defaults equal DeepSpeed's.
struct LauncherArgs {
  std::string hostfile = kDefaultHostfile;
  std::string include;
  std::string exclude;
  int num_nodes = -1;
  int num_gpus = -1;  // also --num_accelerators and our alias --num_procs
  int master_port = kDefaultMasterPort;
  std::string master_addr;  // empty: 127.0.0.1 for a local run
  int node_rank = -1;       // with --no_ssh or --world_info
  std::string launcher;     // pdsh, ssh, openmpi, slurm; empty: pdsh when found, else ssh
  std::string launcher_args;
  int ssh_port = -1;  // -1: ssh's own default (or ~/.ssh/config)
  std::string comment;
  std::string account;
  bool no_ssh = false;
  bool no_ssh_check = false;
  bool force_multi = false;  // use the multi-node runner even for one host
  std::string autotuning;    // "tune" or "run": the autotuner drives the launch (autotuner.h)
  // Set by a multi-node runner on each node-local launcher it starts (DeepSpeed's launch.py flags):
  std::string world_info;          // base64 resource pool of the whole job (world_info.h)
  bool stop_on_stdin_eof = false;  // stop the ranks when the runner's connection closes
  bool no_local_rank = false;
  bool save_pid = false;
  std::string enable_each_rank_log;  // directory; empty (or DeepSpeed's "None") = off
  bool bind_cores_to_rank = false;
  std::string bind_core_list;  // "1,3-5,7"; empty = every core this process may run on
  std::string user_script;
  std::vector<std::string> user_args;  // everything after user_script, untouched
};

// Parses argv (argv[0] is the program name). Throws LaunchError for an unknown or malformed flag, a
// missing program, or a flag deepspeed-cpp does not support (Python-only --module/--no_python,
// elastic training, ...).
LauncherArgs parse_args(const std::vector<std::string>& argv);

// ---- planning (launch_plan.cc) ----

// What this launcher starts on this machine: its node's share of the world.
struct LocalLaunch {
  std::string program;
  std::vector<std::string> program_args;
  std::string master_addr = kLocalMasterAddr;
  int master_port = kDefaultMasterPort;
  int node_rank = 0;
  int num_nodes = 1;
  int world_size = 1;
  int first_rank = 0;      // global rank of local rank 0 (slots of the nodes before this one)
  std::vector<int> slots;  // this node's slot ids; their count is the local world size
  bool pass_local_rank_arg =
      true;               // DeepSpeed inserts `--local_rank=N` before the program's arguments
  bool save_pid = false;  // write /tmp/<launcher pid>.deepspeed while running
  std::string each_rank_log_dir;  // per-rank log files instead of prefixed output
  std::vector<int> bind_cores;    // non-empty: split these cores evenly over the local ranks
  int kill_grace_seconds = 5;     // SIGTERM -> SIGKILL delay when stopping ranks
  bool stop_on_stdin_eof = false;  // stdin's end-of-file means the multi-node runner is gone
  std::string job_id;  // DS_JOB_ID for every rank (job_id.h); empty: not set
};

// The hosts and slots a run uses: the hostfile's pool (or this machine's devices when there is
// none), then --include/--exclude, --num_nodes, --num_gpus. With --world_info, its pool as given.
ResourcePool active_resources(const LauncherArgs& args,
                              const std::optional<ResourcePool>& hostfile_pool);

// True when the run needs a multi-node runner: more than one host, a host that is not this
// machine, or --force_multi; never with --no_ssh or --world_info (this node's share only).
bool needs_multinode(const LauncherArgs& args, const std::optional<ResourcePool>& hostfile_pool);

// Applies DeepSpeed's rules to decide the world and this node's part of it. `hostfile_pool` is
// fetch_hostfile()'s result. Single-node cases: no hostfile; one selected host that is this
// machine; --no_ssh or --world_info with --node_rank. Throws LaunchError when needs_multinode().
LocalLaunch plan_launch(const LauncherArgs& args, const std::optional<ResourcePool>& hostfile_pool);

// ---- multi-node (multinode_plan.cc, multinode_commands.cc, multinode_runner.cc) ----

// A run across hosts: one node-local launcher per host started over ssh or pdsh (each runs
// `deepspeed --world_info=... --node_rank=R ...` and starts its own ranks), or every rank started
// directly by mpirun (openmpi) or srun (slurm), which find their rank in OMPI_*/SLURM_* variables.
struct MultiNodeLaunch {
  std::string backend;  // "pdsh", "ssh", "openmpi", "slurm"
  ResourcePool pool;    // hosts in rank order
  std::string master_addr;  // empty: resolved at run time (address of the first host)
  int master_port = kDefaultMasterPort;
  std::vector<std::pair<std::string, std::string>> exports;  // NAME, VALUE for every rank
  std::string launcher_exe;  // absolute path of `deepspeed`, the same on every host
  std::string cwd;           // the ranks run here on every host
  std::vector<std::string> node_flags;  // node-local launcher flags (--no_local_rank, ...)
  std::string program;
  std::vector<std::string> program_args;
  std::vector<std::string> launcher_args;  // --launcher_args split into words
  int ssh_port = -1;
  std::string comment;  // slurm
  std::string account;  // slurm
  bool check_ssh = true;
  bool save_pid = false;  // /tmp/<pid>.deepspeed for this launcher (not the node launchers)
  std::string job_id;     // DS_JOB_ID exported to every node and rank (job_id.h)
};

// DeepSpeed's multi-node decisions: backend (--launcher; pdsh when found, else ssh), the active
// pool, flags each node-local launcher gets, and the checks that need no host (unsupported
// backends, options a backend cannot honour). Exports and the master address are filled by
// run_multinode().
MultiNodeLaunch plan_multinode(const LauncherArgs& args,
                               const std::optional<ResourcePool>& hostfile_pool);

// The command line every node-local launcher runs, for the remote host's shell: `cd <cwd> && exec
// env NAME=VALUE ... deepspeed --world_info=... --node_rank=<node_rank> ...`. Every value is
// single-quoted; `node_rank` is inserted as is (pdsh's "%n" placeholder or a number).
std::string node_command(const MultiNodeLaunch& launch, const std::string& node_rank);

// Complete argv of each backend. pdsh and ssh: one node_command each; pdsh's own '%' expansion is
// escaped in everything but the node rank, and its fanout covers every host. mpirun also gets
// --ssh_port for its daemons. mpirun gets `hostfile_path` (mpi_hostfile()'s text
// written there) and the exports as -x NAME=VALUE; srun gets --export=ALL,NAME=VALUE,....
std::vector<std::string> pdsh_argv(const MultiNodeLaunch& launch);
std::vector<std::string> ssh_argv(const MultiNodeLaunch& launch, int node);
std::vector<std::string> mpirun_argv(const MultiNodeLaunch& launch,
                                     const std::string& hostfile_path);
std::vector<std::string> srun_argv(const MultiNodeLaunch& launch);
std::string mpi_hostfile(const ResourcePool& pool);

// Runs the job: checks each host answers over ssh (unless --no_ssh_check; not for slurm), resolves
// the master address once (`hostname -I` of the first host over ssh; the first host's name for
// slurm), collects the exports (exports.h), starts the backend and supervises it like run_local():
// output passes through, signals are forwarded, and when one host fails the others are stopped.
// Returns the failing host's exit code, 0 when all succeed.
int run_multinode(MultiNodeLaunch launch);

// ---- local spawner (local_runner.cc) ----

// Starts launch.slots.size() ranks with the torchrun-style environment (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, CROSS_RANK, CROSS_SIZE, MASTER_ADDR,
// MASTER_PORT, ...), prefixes their output lines with `[rankN]: `, forwards SIGINT/SIGTERM/SIGHUP,
// and stops every rank when one fails. Returns 0 when all ranks exit 0, else the first failing
// rank's exit code (128+signal when killed), or 128+signal when the launcher itself was signalled.
// Waits for every child before returning.
int run_local(const LocalLaunch& launch);

// What `deepspeed --autotuning tune|run` runs instead of the launch: given the parsed arguments and
// the whole command line. The autotuner (autotuner.h) provides it; the launcher does not link it.
using AutotuneCommand = int (*)(const LauncherArgs& args, const std::vector<std::string>& argv);

// The whole `deepspeed` command: parse, plan, run. Prints one-line errors to stderr; returns the
// process exit code (2 for a command-line error, 1 for other bad input, otherwise run_local()'s).
// --autotuning goes to `autotune` (an error when null).
int main(int argc, char** argv, AutotuneCommand autotune = nullptr);

}  // namespace deepspeed::launcher
