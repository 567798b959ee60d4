// One rendezvous store, one job. Two jobs started at once on one MASTER_PORT share a host and a
// port: the loser's rank 0 cannot listen on it and fails, but its other ranks connect to the
// winner's store as clients and, before this check, wrote their Gloo addresses over the winner's
// own, joining its world until the loser's launcher killed them (the winner then died with
// "Connection reset by peer" a few dozen steps in). Here rank 0 publishes its job's identity
// (DistEnv::job_id) in the store, and every other rank compares it with its own before it sets
// any key (connecting has only added to c10d's count of connected clients, which rank 0 reads
// once, at start-up). The job's own keys then live under a prefix named by its identity.
//
// Thread-safety: call once per process, from init_distributed.
#pragma once

#include <memory>
#include <string>

#include "comm/c10d_backend.h"
#include "comm/env_init.h"

namespace deepspeed::comm::detail {

// The store's view for this job (its keys under "job/<id>/"), after rank 0 published `env.job_id`
// and any other rank found the same identity there. A rank whose identity differs throws CommError
// naming both identities, where its own came from and the address, without setting a key; it waits
// at most the store's timeout for rank 0's entry.
std::shared_ptr<KeyValueStore> join_job_store(const std::shared_ptr<KeyValueStore>& store, const DistEnv& env);

}  // namespace deepspeed::comm::detail
