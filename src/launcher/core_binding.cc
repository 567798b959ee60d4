// Core lists for --bind_cores_to_rank / --bind_core_list.
#include "launcher/core_binding.h"

#include <sched.h>

#include <algorithm>

#include "deepspeed/error.h"
#include "launcher/text_util.h"

namespace deepspeed::launcher {

std::vector<int> parse_core_list(const std::string& spec) {
  std::vector<int> cores;
  for (const std::string& piece : split(spec, ',')) {
    const std::vector<std::string> ends = split(piece, '-');
    int lo = 0;
    int hi = 0;
    const bool ok = (ends.size() == 1 && parse_int(ends[0], &lo) && (hi = lo) >= 0) ||
                    (ends.size() == 2 && parse_int(ends[0], &lo) && parse_int(ends[1], &hi) &&
                     lo >= 0 && lo <= hi);
    DS_CHECK_T(LaunchError, ok, "--bind_core_list: bad entry '", piece, "' in '", spec,
               "'; expected e.g. 1,3-5,7");
    for (int c = lo; c <= hi; ++c) cores.push_back(c);
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  return cores;
}

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cores.push_back(c);
    }
  }
  return cores;
}

std::vector<int> cores_for_rank(const std::vector<int>& cores, int num_local_ranks,
                                int local_rank) {
  const int per_rank = num_local_ranks > 0 ? static_cast<int>(cores.size()) / num_local_ranks : 0;
  DS_CHECK_T(LaunchError, per_rank > 0, "--bind_cores_to_rank: ", cores.size(), " cores for ",
             num_local_ranks, " local ranks; each rank needs at least one core");
  return std::vector<int>(cores.begin() + per_rank * local_rank,
                          cores.begin() + per_rank * (local_rank + 1));
}

}  // namespace deepspeed::launcher
