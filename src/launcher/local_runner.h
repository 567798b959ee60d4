// Pieces of the local spawner (run_local() in the public header) that are worth testing on their
// own: what each rank's command line and environment are. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "launcher/launcher.h"

namespace deepspeed::launcher {

// The rank's argv: the program as given, `--local_rank=N` unless disabled (DeepSpeed inserts it
// before the program's own arguments), then the program's arguments untouched.
std::vector<std::string> rank_argv(const LocalLaunch& launch, int local_rank);

// `base_env` (NAME=value strings, e.g. from environ) with the distributed variables of local rank
// `local_rank` set, replacing any inherited values: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// LOCAL_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, NODE_RANK, CROSS_RANK, CROSS_SIZE, ROLE_RANK,
// ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and OMP_NUM_THREADS when cores are bound.
std::vector<std::string> rank_environment(const LocalLaunch& launch, int local_rank,
                                          const std::vector<std::string>& base_env);

// The executable that `program` names: a path containing '/' as is, otherwise the first match on
// $PATH. Throws LaunchError when it does not exist or is not executable.
std::string resolve_program(const std::string& program);

}  // namespace deepspeed::launcher
