// deepspeed::launcher::main(): the whole `deepspeed` command, mapping each kind of failure to an
// exit code.
#include <cstdio>
#include <cstdlib>

#include "launcher/launcher.h"
#include "launcher/job_id.h"
#include "launcher/launcher_args.h"

namespace deepspeed::launcher {

int main(int argc, char** argv, AutotuneCommand autotune) {
  try {
    const std::vector<std::string> all(argv, argv + argc);
    const LauncherArgs args = parse_args(all);
    if (!args.autotuning.empty()) {
      DS_CHECK_T(UsageError, autotune != nullptr,
                 "--autotuning: this program was built without the autotuner");
      return autotune(args, all);
    }
    // A node started by a multi-node runner gets the pool in --world_info; its own hostfile (if
    // any) is not the job's.
    const std::optional<ResourcePool> pool =
        args.world_info.empty() ? fetch_hostfile(args.hostfile) : std::nullopt;
    if (!pool.has_value() && args.world_info.empty() && args.hostfile != kDefaultHostfile) {
      // DeepSpeed silently falls back to local resources; an explicit path that is missing is
      // likely a typo.
      std::fprintf(stderr,
                   "deepspeed: warning: hostfile %s not found; using local resources only\n",
                   args.hostfile.c_str());
    }
    const char* inherited = std::getenv(kJobIdVar);
    const std::string job_id = inherited != nullptr ? inherited : "";
    if (needs_multinode(args, pool)) {
      MultiNodeLaunch m = plan_multinode(args, pool);
      m.job_id = job_id_for(args, static_cast<int>(m.pool.size()), job_id);
      return run_multinode(std::move(m));
    }
    LocalLaunch local = plan_launch(args, pool);
    local.job_id = job_id_for(args, local.num_nodes, job_id);
    return run_local(local);
  } catch (const HelpRequested& help) {
    std::fputs(help.what(), stdout);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepspeed: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepspeed: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace deepspeed::launcher
