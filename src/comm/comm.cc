// The process-wide comm state: init_distributed from the environment, the world and sub-groups,
// teardown.
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

#include "comm/c10d_backend.h"
#include "comm/env_init.h"
#include "comm/job_store.h"
#include "comm/process_group_impl.h"
#include "comm/world_state.h"
#include "deepspeed/accelerator.h"

namespace deepspeed::comm {
namespace {

using ::deepspeed::detail::str_cat;

constexpr std::chrono::milliseconds kDefaultTimeout{30 * 60 * 1000};  // torch's default

struct CommState {
  detail::DistEnv env;
  std::string backend;
  int device_index = -1;  // the device bind_local_device bound (an accelerator's), every NCCL group's
  std::chrono::milliseconds timeout{0};
  bool check = false;
  std::shared_ptr<detail::KeyValueStore> store;
  std::shared_ptr<ProcessGroup::Impl> world;
  std::vector<std::shared_ptr<ProcessGroup::Impl>> groups;  // every group made, for teardown
  int next_group_id = 1;
  int64_t generation = 0;  // world_generation()
  std::map<std::string, std::shared_ptr<void>> attached;  // world_state(): ends with this world
};

std::mutex& state_mutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
// Heap-allocated and never freed unless destroy_process_group() runs: Gloo threads must not be torn
// down by static destructors in an unspecified order at exit.
CommState*& state_ptr() {
  static CommState* s = nullptr;
  return s;
}

CommState& state() {
  CommState* s = state_ptr();
  DS_CHECK_T(CommError, s != nullptr,
             "deepspeed::comm is not initialized; call deepspeed::comm::init_distributed() first");
  return *s;
}

std::string group_name(int id, const std::vector<int>& ranks) {
  std::string s = str_cat("#", id, " {");
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

std::shared_ptr<ProcessGroup::Impl> make_group(CommState& s, const std::string& name,
                                               const std::string& prefix, std::vector<int> ranks,
                                               std::chrono::milliseconds timeout) {
  auto g = std::make_shared<ProcessGroup::Impl>();
  g->name = name;
  g->ranks = std::move(ranks);
  g->global_rank = s.env.rank;
  g->timeout = timeout;
  g->check = s.check;
  for (size_t i = 0; i < g->ranks.size(); ++i) {
    if (g->ranks[i] == s.env.rank) g->group_rank = static_cast<int>(i);
  }
  if (g->group_rank >= 0) {
    detail::BackendOptions o;
    o.name = s.backend;
    o.rank = g->group_rank;
    o.size = static_cast<int>(g->ranks.size());
    o.timeout = timeout;
    o.master_addr = s.env.master_addr;
    o.device_index = s.device_index;
    g->backend = detail::create_backend(o, s.store->with_prefix(prefix + "/pg/"));
    g->check_store = s.store->with_prefix(prefix + "/");
  }
  s.groups.push_back(g);
  return g;
}

// The caller's choice, else DS_COMM_BACKEND (e.g. gloo for several ranks sharing one GPU, which NCCL refuses), else
// the accelerator's.
std::string chosen_backend(const std::string& asked) {
  if (!asked.empty()) return asked;
  const char* env_backend = std::getenv("DS_COMM_BACKEND");
  if (env_backend != nullptr && *env_backend) return env_backend;
  return accelerator::get_accelerator().communication_backend_name();
}

}  // namespace

void init_distributed(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(state_mutex());
  DS_CHECK_T(CommError, state_ptr() == nullptr,
             "init_distributed: already initialized (call destroy_process_group() first)");
  auto s = std::make_unique<CommState>();
  detail::EnvLookup env = detail::process_env();
  s->env = detail::read_dist_env(env);
  s->timeout =
      options.timeout ? *options.timeout : detail::read_timeout_env(env).value_or(kDefaultTimeout);
  DS_CHECK(s->timeout.count() > 0, "init_distributed: timeout must be positive, got ",
           s->timeout.count(), "ms");
  s->check = options.check_collectives ? *options.check_collectives
                                       : detail::read_check_env(env).value_or(false);
  s->backend = chosen_backend(options.backend);
  // Each rank takes its LOCAL_RANK's device before any group exists: NCCL communicators belong to a device.
  accelerator::bind_local_device(s->env.local_rank);
  if (accelerator::get_accelerator().device_count() > 0 && s->backend == "nccl")
    s->device_index = accelerator::get_accelerator().current_device();
  if (s->env.single_process) {
    s->store = detail::create_local_store();
  } else {
    s->store = detail::join_job_store(
        detail::create_tcp_store(s->env.master_addr, s->env.master_port, s->env.rank == 0, s->env.world_size,
                                 s->timeout),
        s->env);
  }
  std::vector<int> all(s->env.world_size);
  for (int i = 0; i < s->env.world_size; ++i) all[i] = i;
  s->world = make_group(*s, "world", "ds/world", all, s->timeout);
  if (options.verbose && s->env.rank == 0) {
    std::cout << "deepspeed::comm: initialized " << s->backend << " world of " << s->env.world_size
              << " rank(s) via "
              << (s->env.single_process ? std::string("a local store")
                                        : str_cat(s->env.master_addr, ":", s->env.master_port))
              << ", timeout " << s->timeout.count() << "ms"
              << (s->check ? ", collective check mode on" : "") << std::endl;
  }
  static int64_t worlds_started = 0;  // under state_mutex()
  s->generation = ++worlds_started;
  state_ptr() = s.release();
}

std::shared_ptr<void> world_state(const std::string& key, const std::function<std::shared_ptr<void>()>& make) {
  if (!is_initialized()) init_distributed();
  std::lock_guard<std::mutex> lock(state_mutex());
  CommState& s = state();
  auto it = s.attached.find(key);
  if (it == s.attached.end()) it = s.attached.emplace(key, make()).first;
  return it->second;
}

int64_t world_generation() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state_ptr() != nullptr ? state_ptr()->generation : 0;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state_ptr() != nullptr;
}

BackendCapabilities backend_capabilities() {
  std::lock_guard<std::mutex> lock(state_mutex());
  if (state_ptr() == nullptr) return detail::capabilities_of(chosen_backend(""));
  return state().world->backend->capabilities();
}

std::string BackendCapabilities::describe() const {
  const auto yes_no = [](bool native, const char* fallback) {
    return native ? std::string("native") : std::string("fallback (") + fallback + ")";
  };
  std::string dtypes;
  for (at::ScalarType t : reduce_dtypes) dtypes += (dtypes.empty() ? "" : " ") + std::string(c10::toString(t));
  return str_cat(backend, " of LibTorch ", library_version, ": avg ", yes_no(avg, "sum, then divide"),
                 "; all_gather_into_tensor ", yes_no(all_gather_into_tensor, "list all-gather"),
                 "; reduce_scatter_tensor ", yes_no(reduce_scatter_tensor, "all-to-all + local sum"),
                 "; partitioned collectives: ",
                 per_owner_partitioned ? "one broadcast/reduce per owner"
                 : in_place_by_owner  ? "flat calls, in-place ones per owner (no whole-buffer staging)"
                                      : "flat calls",
                 "; reduces natively: ", dtypes.empty() ? "none" : dtypes,
                 fallbacks_forced ? " (fallbacks forced by DS_COMM_FORCE_FALLBACKS)" : "");
}

int get_rank() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state().env.rank;
}
int get_world_size() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state().env.world_size;
}
int get_local_rank() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state().env.local_rank;
}
int get_local_world_size() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return state().env.local_world_size;
}

ProcessGroup get_world_group() {
  std::lock_guard<std::mutex> lock(state_mutex());
  return ProcessGroup(state().world);
}

ProcessGroup new_group(std::vector<int> ranks, std::optional<std::chrono::milliseconds> timeout) {
  std::lock_guard<std::mutex> lock(state_mutex());
  CommState& s = state();
  DS_CHECK(!ranks.empty(), "new_group: ranks is empty");
  std::vector<bool> seen(s.env.world_size, false);
  for (int r : ranks) {
    DS_CHECK(r >= 0 && r < s.env.world_size, "new_group: rank ", r, " is outside the world of ",
             s.env.world_size);
    DS_CHECK(!seen[r], "new_group: rank ", r, " is listed twice");
    seen[r] = true;
  }
  // Every rank takes the next id, members or not, so ids (and store prefixes) agree across the
  // world.
  int id = s.next_group_id++;
  return ProcessGroup(make_group(s, group_name(id, ranks), str_cat("ds/g", id), std::move(ranks),
                                 timeout.value_or(s.timeout)));
}

void barrier() { get_world_group().barrier(); }

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(state_mutex());
  CommState* s = state_ptr();
  if (s == nullptr) return;
  for (auto& g : s->groups) {
    g->destroyed = true;
    g->backend.reset();
    g->check_store.reset();
  }
  state_ptr() = nullptr;
  delete s;
}

}  // namespace deepspeed::comm
