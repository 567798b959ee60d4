// What every rank of a save or load must agree on, and the pieces of a save that are not the engine's state: the
// engine's and the pipeline engine's checkpoints use them.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

#include "deepspeed/comm.h"

namespace deepspeed::runtime {

// Runs `fn` on every rank; when it throws on any rank, every rank throws (the failing ones their
// own error, the others one naming the failed rank). A disk full on one rank must not leave the
// others waiting in the next collective. Collective.
void all_ranks_or_none(comm::ProcessGroup& world, const char* what,
                       const std::function<void()>& fn);

// Throws on every rank when `value` is not the same on all of them (`what` names it). Collective.
void check_same_on_all_ranks(comm::ProcessGroup& world, const std::string& value, const char* what);

// "fp32", "bf16" or "fp16": how checkpoints name the model's dtype.
const char* dtype_name(at::ScalarType t);

// A run id shared by every file of one save: rank 0 draws it and broadcasts it, so a loader can tell a file left
// over from another save. Collective.
std::string make_run_id(comm::ProcessGroup& world);

// Removes the leftovers of saves whose process died (checkpoint.h: remove_stale_files), keeping `tag`. Failing to
// remove them does not fail the save: a warning says what is left.
void remove_stale_checkpoint_files(const std::string& dir, const std::string& tag);

}  // namespace deepspeed::runtime
