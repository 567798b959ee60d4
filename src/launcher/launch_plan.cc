// plan_launch(): DeepSpeed runner.py's decisions (resource pool -> filters -> limits -> single node
// or not) and launch.py's rank layout (global ranks numbered host by host in pool order).
#include <sstream>

#include "deepspeed/launcher.h"
#include "launcher/core_binding.h"

namespace deepspeed::launcher {
namespace {

std::string describe_hosts(const ResourcePool& pool) {
  std::ostringstream os;
  for (size_t i = 0; i < pool.size(); ++i) os << (i ? ", " : "") << pool[i].host;
  return os.str();
}

}  // namespace

LocalLaunch plan_launch(const LauncherArgs& args,
                        const std::optional<ResourcePool>& hostfile_pool) {
  const bool filtering = !args.include.empty() || !args.exclude.empty();
  DS_CHECK_T(
      LaunchError, !(filtering && (args.num_nodes >= 0 || args.num_gpus >= 0)),
      "--num_nodes/--num_gpus cannot be combined with --include/--exclude; use one or the other");

  ResourcePool pool;
  if (hostfile_pool.has_value()) {
    pool = *hostfile_pool;
  } else {
    pool.push_back(HostSlots{"localhost", {}});
    for (int s = 0; s < local_device_count(); ++s) pool[0].slots.push_back(s);
    DS_CHECK_T(LaunchError, args.num_nodes <= 1, "--num_nodes ", args.num_nodes,
               " but there is no hostfile at ", args.hostfile, " to list other nodes");
  }

  ResourcePool active = parse_resource_filter(pool, args.include, args.exclude);
  DS_CHECK_T(LaunchError, !active.empty(), "no resources left after --include/--exclude");
  if (args.num_nodes != -1) active = limit_num_nodes(active, args.num_nodes);
  if (args.num_gpus != -1) active = limit_num_gpus(active, args.num_gpus);

  int node = 0;
  std::string master_addr = args.master_addr;
  if (args.no_ssh) {
    // DeepSpeed's no-ssh mode: the same command runs on every node, each starting its own share.
    DS_CHECK_T(LaunchError, args.node_rank >= 0 && args.node_rank < static_cast<int>(active.size()),
               "--no_ssh needs --node_rank in [0, ", active.size(), "), got ", args.node_rank);
    node = args.node_rank;
    DS_CHECK_T(LaunchError, active.size() == 1 || !master_addr.empty(), "--no_ssh across ",
               active.size(), " nodes needs --master_addr (the address of node 0, '",
               active[0].host, "')");
  } else {
    const bool local =
        active.size() == 1 && (!hostfile_pool.has_value() || is_local_host(active[0].host));
    DS_CHECK_T(LaunchError, local, "multi-node launch on ", active.size(), " host(s) (",
               describe_hosts(active), ") via ", args.launcher,
               " is not supported yet; run on one local host, or start each node with --no_ssh "
               "--node_rank R");
  }
  if (master_addr.empty()) master_addr = kLocalMasterAddr;

  LocalLaunch launch;
  launch.program = args.user_script;
  launch.program_args = args.user_args;
  launch.master_addr = master_addr;
  launch.master_port = args.master_port;
  launch.node_rank = node;
  launch.num_nodes = static_cast<int>(active.size());
  launch.world_size = world_size(active);
  for (int i = 0; i < node; ++i) launch.first_rank += static_cast<int>(active[i].slots.size());
  launch.slots = active[node].slots;
  launch.pass_local_rank_arg = !args.no_local_rank;
  launch.save_pid = args.save_pid;
  launch.each_rank_log_dir = args.enable_each_rank_log;
  if (args.bind_cores_to_rank) {
    launch.bind_cores =
        args.bind_core_list.empty() ? allowed_cores() : parse_core_list(args.bind_core_list);
    // Fail now, before any rank starts, if the cores cannot be shared out.
    cores_for_rank(launch.bind_cores, static_cast<int>(launch.slots.size()), 0);
  } else {
    DS_CHECK_T(LaunchError, args.bind_core_list.empty(),
               "--bind_core_list needs --bind_cores_to_rank");
  }
  return launch;
}

}  // namespace deepspeed::launcher
