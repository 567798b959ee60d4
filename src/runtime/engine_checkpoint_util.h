// Small pieces the engine's checkpoint save and load share (engine_checkpoint.cc,
// engine_checkpoint_load.cc).
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

}  // namespace deepspeed::runtime
