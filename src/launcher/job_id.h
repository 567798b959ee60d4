// The job identity the launcher hands every rank as DS_JOB_ID, so that ranks of two jobs that meet
// at one MASTER_ADDR:MASTER_PORT (two users on the default port 29500) refuse each other at
// rendezvous instead of joining one world (src/comm/job_store.h checks it). Thread-safe.
#pragma once

#include <string>

#include "launcher/launcher.h"

namespace deepspeed::launcher {

inline constexpr char kJobIdVar[] = "DS_JOB_ID";

// 32 hex digits from the kernel's random source: unique across jobs, hosts and users.
std::string new_job_id();

// The identity for a run with `num_nodes` nodes started by this launcher, given DS_JOB_ID from
// its environment (`inherited`, empty when unset):
// - DS_JOB_ID set: that one (a scheduler or a multi-node runner gave it; every node sees the same);
// - a node of a multi-node run (--world_info) or a --no_ssh node of several: empty, since each
//   node's launcher would draw a different one (the job then has no identity and is not told apart
//   from another on its port: export one DS_JOB_ID on every node to name it);
// - otherwise a fresh new_job_id().
std::string job_id_for(const LauncherArgs& args, int num_nodes, const std::string& inherited);

}  // namespace deepspeed::launcher
