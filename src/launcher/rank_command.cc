// What each rank runs with: argv and the torchrun-style environment.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "launcher/core_binding.h"
#include "launcher/job_id.h"
#include "launcher/local_runner.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {

std::vector<std::string> rank_argv(const LocalLaunch& launch, int local_rank) {
  std::vector<std::string> argv;
  argv.push_back(launch.program);
  if (launch.pass_local_rank_arg) argv.push_back("--local_rank=" + std::to_string(local_rank));
  argv.insert(argv.end(), launch.program_args.begin(), launch.program_args.end());
  return argv;
}

std::vector<std::string> rank_environment(const LocalLaunch& launch, int local_rank,
                                          const std::vector<std::string>& base_env) {
  const int local_size = static_cast<int>(launch.slots.size());
  const int rank = launch.first_rank + local_rank;
  // Ordered so the environment is deterministic (and readable when printed).
  std::map<std::string, std::string> set;
  set["RANK"] = std::to_string(rank);
  set["LOCAL_RANK"] = std::to_string(local_rank);
  set["WORLD_SIZE"] = std::to_string(launch.world_size);
  set["LOCAL_WORLD_SIZE"] = std::to_string(local_size);
  set["LOCAL_SIZE"] = std::to_string(local_size);  // DeepSpeed's name for it
  set["GROUP_RANK"] = std::to_string(launch.node_rank);
  set["GROUP_WORLD_SIZE"] = std::to_string(launch.num_nodes);
  set["NODE_RANK"] = std::to_string(launch.node_rank);
  set["CROSS_RANK"] = std::to_string(launch.node_rank);
  set["CROSS_SIZE"] = std::to_string(launch.num_nodes);
  set["ROLE_RANK"] = std::to_string(rank);
  set["ROLE_WORLD_SIZE"] = std::to_string(launch.world_size);
  set["MASTER_ADDR"] = launch.master_addr;
  set["MASTER_PORT"] = std::to_string(launch.master_port);
  if (!launch.job_id.empty()) set[kJobIdVar] = launch.job_id;
  if (!launch.bind_cores.empty()) {
    set["OMP_NUM_THREADS"] =
        std::to_string(cores_for_rank(launch.bind_cores, local_size, local_rank).size());
  }

  std::vector<std::string> env;
  for (const std::string& kv : base_env) {
    const std::string name = kv.substr(0, kv.find('='));
    if (set.count(name) == 0) env.push_back(kv);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

namespace {

// Empty when `path` is an executable regular file, else why not.
std::string why_not_executable(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  // access() grants root X_OK on some file systems even without any x bit; exec would still fail.
  if ((st.st_mode & 0111) == 0) return "not executable (no x permission)";
  if (::access(path.c_str(), X_OK) != 0) return std::strerror(errno);
  return "";
}

}  // namespace

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    const std::string why = why_not_executable(program);
    DS_CHECK_T(LaunchError, why.empty(), "cannot execute program '", program, "': ", why);
    return program;
  }
  const char* path = std::getenv("PATH");
  for (const std::string& dir :
       split(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (why_not_executable(candidate).empty()) return candidate;
  }
  throw LaunchError("cannot execute program '" + program +
                    "': not found on $PATH (give a path, e.g. ./" + program + ")");
}

}  // namespace deepspeed::launcher
