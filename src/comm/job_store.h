// One rendezvous store, one job. Two jobs started at once on one MASTER_PORT share a host and a
// port: the loser's rank 0 cannot listen on it and fails, but its other ranks connect to the
// winner's store as clients and, before this check, wrote their Gloo addresses over the winner's
// own, joining its world until the loser's launcher killed them (the winner then died with "Connection
// reset by peer" a few dozen steps in). Here rank 0 publishes its job's identity (DistEnv::job_id)
// in the store and every other rank compares it with its own before it writes anything; every key
// after that lives under the job's own prefix, so a stranger that got past the check by sharing no
// identity still cannot touch the job's keys.
//
// Thread-safety: call once per process, from init_distributed.
#pragma once

#include <memory>
#include <string>

#include "comm/c10d_backend.h"
#include "comm/env_init.h"

namespace deepspeed::comm::detail {

// The store's view for this job (its keys under "job/<id>/"), after rank 0 published `env.job_id`
// and any other rank found the same identity there. A rank of another job throws CommError naming
// both identities and the address, having written nothing; it waits at most the store's timeout
// for rank 0's entry.
std::shared_ptr<KeyValueStore> join_job_store(const std::shared_ptr<KeyValueStore>& store, const DistEnv& env);

}  // namespace deepspeed::comm::detail
