// Reading the distributed environment (torchrun's and our launcher's variables) into a validated
// struct, with a one-line error naming the variable and value when one is missing or malformed.
// Pure functions of the lookup they are given, so tests need not touch the real environment.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace deepspeed::comm::detail {

// Returns the variable's value, or nullptr when unset (std::getenv's contract).
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();

struct DistEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool single_process = true;  // none of the variables set: a world of one without a TCP store
  // Which job the rank belongs to, the same on all its ranks: only ranks of one job may meet at a
  // rendezvous store (job_store.h). Empty when nothing names the job.
  std::string job_id;
  std::string job_id_source;  // the variable it came from ("DS_JOB_ID", ...), for messages
};

// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT);
// when RANK is unset, a rank started by mpirun (OMPI_COMM_WORLD_*, MV2_COMM_WORLD_*, PMI_*) or
// srun (SLURM_PROCID, SLURM_NTASKS, ...; only with MASTER_ADDR set) finds its place there, as
// DeepSpeed's MPI discovery does. Throws deepspeed::Error, e.g. "init_distributed: RANK='x' is not
// an integer".
DistEnv read_dist_env(const EnvLookup& env);

// The job's identity for a rank placed by `placed_by` ("" for the RANK variables: our launcher or torchrun; else the
// starter read_dist_env found, "OpenMPI", "Slurm", ...): DS_JOB_ID (the deepspeed launcher sets a fresh random one
// per job; export one to name a job yourself), else the placing starter's own: TORCHELASTIC_RUN_ID (torchrun; "none"
// unless --rdzv-id or --standalone), SLURM_JOB_ID.SLURM_STEP_ID (srun), PMIX_NAMESPACE (OpenMPI's mpirun); empty when
// none is set. `*source` (may be null) gets the variable's name. Throws deepspeed::Error naming the variable when
// its value is longer than 256 bytes or holds a control character or a backslash.
std::string read_job_id(const EnvLookup& env, const std::string& placed_by, std::string* source);

// DS_COMM_TIMEOUT in seconds (fractions allowed), or nullopt when unset.
std::optional<std::chrono::milliseconds> read_timeout_env(const EnvLookup& env);
// DS_COMM_CHECK: "1"/"true"/"yes"/"on" or "0"/"false"/"no"/"off"; nullopt when unset.
std::optional<bool> read_check_env(const EnvLookup& env);

}  // namespace deepspeed::comm::detail
