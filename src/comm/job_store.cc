// See job_store.h.
#include "comm/job_store.h"

#include "deepspeed/error.h"

namespace deepspeed::comm::detail {
namespace {

constexpr char kJobKey[] = "ds/job_id";  // outside every job's prefix: the one key a stranger reads

std::string shown(const std::string& id) {
  return id.empty() ? std::string("none") : "'" + ::deepspeed::detail::printable(id) + "'";
}

}  // namespace

std::shared_ptr<KeyValueStore> join_job_store(const std::shared_ptr<KeyValueStore>& store, const DistEnv& env) {
  if (env.rank == 0) {
    store->set(kJobKey, env.job_id);
  } else {
    const std::string hosts = store->get(kJobKey);
    const std::string from = env.job_id_source.empty() ? "" : " (" + env.job_id_source + ")";
    DS_CHECK_T(CommError, hosts == env.job_id, "rank ", env.rank, " of job ", shown(env.job_id), from,
               " reached the rendezvous store at ", env.master_addr, ":", env.master_port,
               " (MASTER_ADDR/MASTER_PORT) of another job (", shown(hosts), "): port ", env.master_port,
               " is taken by another job (pick another with the launcher's --master_port), or this job's ranks were "
               "given different identities (export one DS_JOB_ID to all of them)");
  }
  return store->with_prefix("job/" + env.job_id);  // c10d puts the '/' after it
}

}  // namespace deepspeed::comm::detail
