// Hang diagnosis: describing collectives ("all_reduce(float[1024])"), the check-mode fingerprint
// exchange that turns a diverged collective into a CommError naming the first divergent rank, and
// the messages of timeouts.
//
// The exchange goes through the rendezvous store rather than the backend: a rank that skipped a
// collective then shows up as "did not reach it" instead of making the check itself hang, and
// mismatched ops never meet on the wire. Thread-safety: check_collective is called by a group's
// issuing thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/c10d_backend.h"

namespace deepspeed::comm::detail {

// "float", "bfloat16", "int64", ...
std::string dtype_name(at::ScalarType t);
// "float[4, 8]"
std::string tensor_desc(const at::Tensor& t);
// "2s", "1.5s", "250ms", "30min"
std::string format_duration(std::chrono::milliseconds d);

// What ranks compare: `key` must be equal on all members (it leaves out what may differ
// legitimately, such as all_to_all split sizes); `description` is what messages show.
struct Fingerprint {
  std::string key;
  std::string description;
};

struct GroupView {
  std::string name;        // "world"
  std::vector<int> ranks;  // global ranks by group rank
  int group_rank = 0;
  std::chrono::milliseconds timeout{0};
};

// Publishes this rank's fingerprint of collective `seq` and waits for every member's. Throws
// CommError on every member when they differ: "collective #7 diverged on group world: rank 0 called
// all_reduce(float[1024]), rank 1 called broadcast(float[1024], src=0)"; CommTimeoutError when some
// member does not arrive in time.
void check_collective(KeyValueStore& store, const GroupView& group, uint64_t seq,
                      const Fingerprint& fp);

}  // namespace deepspeed::comm::detail
