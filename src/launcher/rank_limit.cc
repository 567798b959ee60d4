// See rank_limit.h.
#include "launcher/rank_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "deepspeed/error.h"
#include "launcher/core_binding.h"

namespace deepspeed::launcher {
namespace {

constexpr int kFdsPerRank = 3;      // stdout and stderr read ends, a stdin pipe's write end
constexpr int kFdsReserved = 64;    // the launcher's own: std streams, signal pipe, log files, a fork's extras

}  // namespace

int local_rank_limit(int cores, const char* override_value) {
  if (override_value != nullptr && *override_value) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(override_value, &end, 10);
    DS_CHECK_T(LaunchError, errno == 0 && end != override_value && *end == '\0' && v >= 1 && v <= (1 << 20),
               kMaxLocalRanksVar, "='", ::deepspeed::detail::printable(override_value),
               "' must be a positive integer (the most ranks one node may start)");
    return static_cast<int>(v);
  }
  return std::max(kMinRankLimit, kRanksPerCore * std::max(1, cores));
}

void check_local_rank_count(int ranks) {
  const std::string what = ::deepspeed::detail::str_cat(
      "cannot start ", ranks, " ranks on this node (--num_procs/--num_gpus or the hostfile's slots)");
  const int cores = std::max(1, static_cast<int>(allowed_cores().size()));
  const int limit = local_rank_limit(cores, std::getenv(kMaxLocalRanksVar));
  DS_CHECK_T(LaunchError, ranks <= limit, what, ": more than ", limit,
             " (", kRanksPerCore, " per core for the ", cores, " core(s) this launcher may use, at least ",
             kMinRankLimit, "); if you mean it, set ", kMaxLocalRanksVar, "=", ranks);

  const rlim_t fds_needed = static_cast<rlim_t>(ranks) * kFdsPerRank + kFdsReserved;
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY && files.rlim_cur < fds_needed &&
      files.rlim_cur < files.rlim_max) {
    // Raised as far as needed, no further (ranks inherit it, and some programs walk every possible descriptor).
    files.rlim_cur = files.rlim_max == RLIM_INFINITY ? fds_needed : std::min(fds_needed, files.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &files);
    ::getrlimit(RLIMIT_NOFILE, &files);
  }
  DS_CHECK_T(LaunchError, files.rlim_cur == RLIM_INFINITY || fds_needed <= files.rlim_cur, what, ": they need about ", fds_needed, " open files in the launcher, its limit is ",
             files.rlim_cur, " (ulimit -n)");
  rlimit procs{};
  DS_CHECK_T(LaunchError,
             ::getrlimit(RLIMIT_NPROC, &procs) != 0 || procs.rlim_cur == RLIM_INFINITY ||
                 static_cast<rlim_t>(ranks) < procs.rlim_cur,
             what, ": this user's process limit is ", procs.rlim_cur, " (ulimit -u)");
}

}  // namespace deepspeed::launcher
