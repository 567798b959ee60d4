// How many ranks this node's launcher may start, checked before it forks the first one: a typo such
// as `--num_procs 10000` used to fork thousands of ranks before failing on open files, leaving the
// node thrashing. Two bounds:
// - what the launcher itself needs: two pipe ends per rank stay open for its output (three with a
//   stdin pipe, five while one is forked), against RLIMIT_NOFILE (its soft limit raised as far as
//   needed, up to the hard one) and RLIMIT_NPROC. No override: past them it fails.
// - a sanity bound, max(kMinRankLimit, kRanksPerCore x cores this process may run on): more ranks
//   than that on one node is almost surely a mistake; DS_MAX_LOCAL_RANKS=N sets it for those who mean it.
// Thread-safety: reads process limits and the environment; call from the launcher's thread.
#pragma once

#include <string>

namespace deepspeed::launcher {

inline constexpr int kMinRankLimit = 64;
inline constexpr int kRanksPerCore = 8;
inline constexpr char kMaxLocalRanksVar[] = "DS_MAX_LOCAL_RANKS";

// The sanity bound for a node with `cores` usable cores given DS_MAX_LOCAL_RANKS' value (null when
// unset). Throws LaunchError when the variable is not a positive integer.
int local_rank_limit(int cores, const char* override_value);

// Throws LaunchError, naming the bound and how to lift it where one can, when this node cannot or
// should not start `ranks` ranks.
void check_local_rank_count(int ranks);

}  // namespace deepspeed::launcher
