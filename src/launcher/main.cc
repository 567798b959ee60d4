// deepspeed::launcher::main(): the whole `deepspeed` command, mapping each kind of failure to an
// exit code.
#include <cstdio>

#include "launcher/launcher.h"
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
    if (needs_multinode(args, pool)) return run_multinode(plan_multinode(args, pool));
    return run_local(plan_launch(args, pool));
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
