// --bind_cores_to_rank: which cores each local rank gets. DeepSpeed wraps each rank in `numactl
// -C`; we set the affinity mask directly in the child (no numactl dependency), with the same even
// split. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace deepspeed::launcher {

// Parses "1,3-5,7" into {1,3,4,5,7} (DeepSpeed's --bind_core_list syntax). Throws LaunchError
// naming the bad piece.
std::vector<int> parse_core_list(const std::string& spec);

// The cores this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cores();

// Local rank `local_rank`'s share of `cores` when split evenly over `num_local_ranks` (the
// remainder stays unused, as in DeepSpeed). Throws LaunchError when there are fewer cores than
// ranks.
std::vector<int> cores_for_rank(const std::vector<int>& cores, int num_local_ranks, int local_rank);

}  // namespace deepspeed::launcher
