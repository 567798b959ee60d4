// The resource pool: DeepSpeed's --include/--exclude filter syntax and the --num_nodes/--num_gpus
// limits, plus what "local resources" means when there is no hostfile.
#include <dirent.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "launcher/launcher.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {
namespace {

std::string join_slots(const std::vector<int>& slots) {
  std::ostringstream os;
  for (size_t i = 0; i < slots.size(); ++i) os << (i ? "," : "") << slots[i];
  return os.str();
}

std::string join_hosts(const ResourcePool& pool) {
  std::ostringstream os;
  for (size_t i = 0; i < pool.size(); ++i) os << (i ? ", " : "") << pool[i].host;
  return os.str();
}

const HostSlots* find_host(const ResourcePool& pool, const std::string& host) {
  for (const HostSlots& h : pool) {
    if (h.host == host) return &h;
  }
  return nullptr;
}

}  // namespace

std::vector<HostSlots> parse_node_config_list(const std::string& spec) {
  std::vector<HostSlots> out;
  for (const std::string& node : split(spec, '@')) {
    DS_CHECK_T(LaunchError, !node.empty(), "empty node in '", spec,
               "'; expected NAME[:SLOT[,SLOT...]][@NAME...]");
    const std::vector<std::string> parts = split(node, ':');
    DS_CHECK_T(LaunchError, parts.size() <= 2 && !parts[0].empty(), "bad node '", node, "' in '",
               spec, "'; expected NAME[:SLOT[,SLOT...]]");
    std::vector<int> slots;
    if (parts.size() == 2) {
      for (const std::string& s : split(parts[1], ',')) {
        int slot = 0;
        DS_CHECK_T(LaunchError, parse_int(s, &slot) && slot >= 0, "bad slot '", s, "' for host '",
                   parts[0], "' in '", spec, "'; slots are non-negative integers");
        slots.push_back(slot);
      }
    }
    HostSlots* existing = nullptr;
    for (HostSlots& h : out) {
      if (h.host == parts[0]) existing = &h;
    }
    if (existing == nullptr) {
      out.push_back(HostSlots{parts[0], {}});
      existing = &out.back();
    }
    existing->slots.insert(existing->slots.end(), slots.begin(), slots.end());
  }
  for (HostSlots& h : out) {
    std::sort(h.slots.begin(), h.slots.end());
    h.slots.erase(std::unique(h.slots.begin(), h.slots.end()), h.slots.end());
  }
  return out;
}

ResourcePool parse_resource_filter(const ResourcePool& pool, const std::string& include,
                                   const std::string& exclude) {
  DS_CHECK_T(LaunchError, include.empty() || exclude.empty(),
             "--include and --exclude are mutually exclusive; give one of them");
  if (include.empty() && exclude.empty()) return pool;
  const bool including = !include.empty();
  const char* flag = including ? "--include" : "--exclude";

  // Including starts from nothing and adds; excluding starts from everything and removes.
  ResourcePool filtered;
  if (!including) filtered = pool;
  for (const HostSlots& want : parse_node_config_list(including ? include : exclude)) {
    const HostSlots* have = find_host(pool, want.host);
    DS_CHECK_T(LaunchError, have != nullptr, flag, " names host '", want.host,
               "', which is not in the resource pool (", join_hosts(pool), ")");
    for (int slot : want.slots) {
      DS_CHECK_T(LaunchError,
                 std::find(have->slots.begin(), have->slots.end(), slot) != have->slots.end(), flag,
                 " names slot ", slot, " on host '", want.host, "', which has slots ",
                 join_slots(have->slots));
    }
    if (including) {
      filtered.push_back(HostSlots{want.host, want.slots.empty() ? have->slots : want.slots});
    } else {
      for (HostSlots& h : filtered) {
        if (h.host != want.host) continue;
        if (want.slots.empty()) {
          h.slots.clear();
        } else {
          for (int slot : want.slots)
            h.slots.erase(std::remove(h.slots.begin(), h.slots.end(), slot), h.slots.end());
        }
      }
    }
  }

  // Keep the pool's host order: it decides which global ranks land on which host.
  ResourcePool ordered;
  for (const HostSlots& h : pool) {
    const HostSlots* f = find_host(filtered, h.host);
    if (f != nullptr && !f->slots.empty()) ordered.push_back(*f);
  }
  return ordered;
}

ResourcePool limit_num_nodes(const ResourcePool& pool, int num_nodes) {
  DS_CHECK_T(LaunchError, num_nodes > 0, "--num_nodes must be positive, got ", num_nodes);
  ResourcePool out(pool.begin(), pool.begin() + std::min<size_t>(pool.size(), num_nodes));
  return out;
}

ResourcePool limit_num_gpus(const ResourcePool& pool, int num_gpus) {
  DS_CHECK_T(LaunchError, num_gpus > 0, "--num_gpus/--num_procs must be positive, got ", num_gpus);
  ResourcePool out = pool;
  for (HostSlots& h : out) {
    h.slots.clear();
    for (int s = 0; s < num_gpus; ++s) h.slots.push_back(s);
  }
  return out;
}

int world_size(const ResourcePool& pool) {
  int n = 0;
  for (const HostSlots& h : pool) n += static_cast<int>(h.slots.size());
  return n;
}

int local_device_count() {
  int local_size = 0;
  const char* env = std::getenv("LOCAL_SIZE");
  if (env != nullptr && parse_int(env, &local_size) && local_size > 0) return local_size;
  int numa_nodes = 0;
  if (DIR* dir = ::opendir("/sys/devices/system/node")) {
    while (const dirent* e = ::readdir(dir)) {
      int id = 0;
      if (std::strncmp(e->d_name, "node", 4) == 0 && parse_int(e->d_name + 4, &id)) ++numa_nodes;
    }
    ::closedir(dir);
  }
  return numa_nodes > 0 ? numa_nodes : 1;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) == 0) {
    const std::string full(name);
    const std::string shortname = full.substr(0, full.find('.'));
    if (host == full || host == shortname) return true;
  }
  // A host given by one of this machine's addresses.
  bool found = false;
  ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) == 0) {
    for (ifaddrs* a = addrs; a != nullptr && !found; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      const int family = a->ifa_addr->sa_family;
      if (family != AF_INET && family != AF_INET6) continue;
      char buf[NI_MAXHOST];
      const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      if (::getnameinfo(a->ifa_addr, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) == 0) {
        found = host == buf;
      }
    }
    ::freeifaddrs(addrs);
  }
  return found;
}

}  // namespace deepspeed::launcher
