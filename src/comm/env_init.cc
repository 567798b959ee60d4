// See env_init.h.
#include "comm/env_init.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::comm::detail {
namespace {

constexpr int kDefaultMasterPort = 29500;  // TORCH_DISTRIBUTED_DEFAULT_PORT

constexpr const char* kVars[] = {"RANK",        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                 "MASTER_ADDR", "MASTER_PORT"};

int parse_int(const char* name, const char* value, long lo, long hi) {
  DS_CHECK(
      value != nullptr && *value, "init_distributed: environment variable ", name,
      " is not set (the launcher sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value, &end, 10);
  DS_CHECK(errno == 0 && end != value && *end == '\0', "init_distributed: ", name, "='", value,
           "' is not an integer");
  DS_CHECK(v >= lo && v <= hi, "init_distributed: ", name, "=", v, " is out of range [", lo, ", ",
           hi, "]");
  return static_cast<int>(v);
}

// Where mpirun and srun put a rank's place in the world, for ranks they start directly (the
// deepspeed launcher's openmpi and slurm backends, or by hand).
struct RankSource {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};
constexpr RankSource kRankSources[] = {
    {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE"},
    // Before MPICH's: srun's pmi2 plugin also sets PMI_RANK/PMI_SIZE, without the local rank.
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

// RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE from an MPI or Slurm launch when RANK is unset.
// Slurm's variables also exist in a batch script that runs a single process, so they count only
// when MASTER_ADDR says a distributed run was meant (deepspeed --launcher slurm exports it).
std::optional<DistEnv> discover_rank(const EnvLookup& env, std::string* placed_by) {
  if (env("RANK") != nullptr) return std::nullopt;
  for (const RankSource& src : kRankSources) {
    if (env(src.rank) == nullptr || env(src.size) == nullptr) continue;
    const bool slurm = std::string(src.name) == "Slurm";
    const char* addr = env("MASTER_ADDR");
    if (slurm && (addr == nullptr || !*addr)) continue;
    DistEnv d;
    d.single_process = false;
    d.world_size = parse_int(src.size, env(src.size), 1, 1 << 20);
    d.rank = parse_int(src.rank, env(src.rank), 0, d.world_size - 1);
    d.local_rank = env(src.local_rank) ? parse_int(src.local_rank, env(src.local_rank), 0,
                                                   d.world_size - 1)
                                       : 0;
    d.local_world_size = env(src.local_size) ? parse_int(src.local_size, env(src.local_size), 1,
                                                         d.world_size)
                                             : d.world_size;
    DS_CHECK(addr != nullptr && *addr, "init_distributed: ", src.name, " started this rank (",
             src.size, "=", d.world_size, ") but MASTER_ADDR is not set; export MASTER_ADDR (and ",
             "MASTER_PORT) to every rank, or launch with deepspeed --launcher openmpi/slurm");
    d.master_addr = addr;
    d.master_port = env("MASTER_PORT") ? parse_int("MASTER_PORT", env("MASTER_PORT"), 1, 65535)
                                       : kDefaultMasterPort;
    *placed_by = src.name;
    return d;
  }
  return std::nullopt;
}

}  // namespace

EnvLookup process_env() {
  return [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
}

std::string read_job_id(const EnvLookup& env, const std::string& placed_by, std::string* source) {
  // Only the starter that placed the rank names its job: ranks of one job placed alike read the same variable, where
  // a scheduler's own (SLURM_JOB_ID under mpirun inside an allocation) may differ between a job's nodes.
  std::vector<const char*> vars = {"DS_JOB_ID"};
  if (placed_by.empty()) vars.push_back("TORCHELASTIC_RUN_ID");
  if (placed_by == "Slurm") vars.push_back("SLURM_JOB_ID");
  if (placed_by == "OpenMPI") vars.push_back("PMIX_NAMESPACE");
  std::string name, id;
  for (const char* var : vars) {
    const char* v = env(var);
    if (v == nullptr || !*v) continue;
    name = var;
    id = v;
    if (name == "SLURM_JOB_ID" && env("SLURM_STEP_ID") != nullptr) {
      id += std::string(".") + env("SLURM_STEP_ID");
      name = "SLURM_JOB_ID.SLURM_STEP_ID";
    }
    break;
  }
  DS_CHECK(id.size() <= 256 && ::deepspeed::detail::printable(id) == id, "init_distributed: ", name, "='",
           ::deepspeed::detail::printable(id.substr(0, 64)), id.size() > 64 ? "..." : "",
           "' is not a job identity (at most 256 bytes, no control characters or backslashes)");
  if (source != nullptr) *source = name;
  return id;
}

DistEnv read_dist_env(const EnvLookup& env) {
  std::string placed_by;
  if (std::optional<DistEnv> from_launcher = discover_rank(env, &placed_by)) {
    from_launcher->job_id = read_job_id(env, placed_by, &from_launcher->job_id_source);
    return *from_launcher;
  }
  DistEnv d;
  bool any = false;
  for (const char* v : kVars) any = any || env(v) != nullptr;
  if (!any) return d;  // plain single-process run
  d.single_process = false;
  d.world_size = parse_int("WORLD_SIZE", env("WORLD_SIZE"), 1, 1 << 20);
  d.rank = parse_int("RANK", env("RANK"), 0, d.world_size - 1);
  d.local_rank = parse_int("LOCAL_RANK", env("LOCAL_RANK"), 0, d.world_size - 1);
  d.local_world_size = env("LOCAL_WORLD_SIZE")
                           ? parse_int("LOCAL_WORLD_SIZE", env("LOCAL_WORLD_SIZE"), 1, d.world_size)
                           : d.world_size;
  DS_CHECK(d.local_rank < d.local_world_size, "init_distributed: LOCAL_RANK=", d.local_rank,
           " must be below LOCAL_WORLD_SIZE=", d.local_world_size);
  const char* addr = env("MASTER_ADDR");
  DS_CHECK(addr != nullptr && *addr,
           "init_distributed: environment variable MASTER_ADDR is not set",
           " (the launcher sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
  d.master_addr = addr;
  d.master_port = parse_int("MASTER_PORT", env("MASTER_PORT"), 1, 65535);
  d.job_id = read_job_id(env, "", &d.job_id_source);
  return d;
}

std::optional<std::chrono::milliseconds> read_timeout_env(const EnvLookup& env) {
  const char* v = env("DS_COMM_TIMEOUT");
  if (v == nullptr || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double s = std::strtod(v, &end);
  DS_CHECK(errno == 0 && end != v && *end == '\0' && std::isfinite(s) && s > 0, "DS_COMM_TIMEOUT='",
           v, "' must be a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

std::optional<bool> read_check_env(const EnvLookup& env) {
  const char* v = env("DS_COMM_CHECK");
  if (v == nullptr || !*v) return std::nullopt;
  std::string s = v;
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw Error(::deepspeed::detail::str_cat("DS_COMM_CHECK='", s, "' must be 1/0/true/false"));
}

}  // namespace deepspeed::comm::detail
