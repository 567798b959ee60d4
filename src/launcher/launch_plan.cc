// plan_launch(): DeepSpeed runner.py's decisions (resource pool -> filters -> limits -> single node
// or not) and launch.py's rank layout (global ranks numbered host by host in pool order).
// The multi-node plan is in multinode_plan.cc.
#include <sstream>

#include "launcher/launcher.h"
#include "launcher/core_binding.h"
#include "launcher/world_info.h"

namespace deepspeed::launcher {
namespace {

std::string describe_hosts(const ResourcePool& pool) {
  std::ostringstream os;
  for (size_t i = 0; i < pool.size(); ++i) os << (i ? ", " : "") << pool[i].host;
  return os.str();
}

}  // namespace

ResourcePool active_resources(const LauncherArgs& args,
                              const std::optional<ResourcePool>& hostfile_pool) {
  if (!args.world_info.empty()) {
    // A node-local launcher started by a multi-node runner: the runner selected the resources.
    DS_CHECK_T(
        LaunchError,
        args.include.empty() && args.exclude.empty() && args.num_nodes < 0 && args.num_gpus < 0,
        "--world_info already selects the resources; drop --include/--exclude/--num_nodes/"
        "--num_gpus");
    return decode_world_info(args.world_info);
  }
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
  return active;
}

bool needs_multinode(const LauncherArgs& args, const std::optional<ResourcePool>& hostfile_pool) {
  if (args.no_ssh || !args.world_info.empty()) return false;
  if (args.force_multi) return true;
  const ResourcePool active = active_resources(args, hostfile_pool);
  return active.size() > 1 || (hostfile_pool.has_value() && !is_local_host(active[0].host));
}

LocalLaunch plan_launch(const LauncherArgs& args,
                        const std::optional<ResourcePool>& hostfile_pool) {
  const ResourcePool active = active_resources(args, hostfile_pool);
  int node = 0;
  std::string master_addr = args.master_addr;
  if (args.no_ssh || !args.world_info.empty()) {
    // DeepSpeed's no-ssh mode, or a node of a multi-node run: start this node's share only.
    const char* flag = args.no_ssh ? "--no_ssh" : "--world_info";
    DS_CHECK_T(LaunchError, args.node_rank >= 0 && args.node_rank < static_cast<int>(active.size()),
               flag, " needs --node_rank in [0, ", active.size(), "), got ", args.node_rank);
    node = args.node_rank;
    DS_CHECK_T(LaunchError, active.size() == 1 || !master_addr.empty(), flag, " across ",
               active.size(), " nodes needs --master_addr (the address of node 0, '",
               active[0].host, "')");
  } else {
    DS_CHECK_T(LaunchError, !needs_multinode(args, hostfile_pool), "the run spans ", active.size(),
               " host(s) (", describe_hosts(active),
               "): it needs the multi-node runner (run_multinode), not plan_launch");
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
  launch.stop_on_stdin_eof = args.stop_on_stdin_eof;
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
