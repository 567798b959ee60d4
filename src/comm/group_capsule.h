// A process group kept in an autograd node's saved data (the collectives written as autograd functions in moe/,
// tp/ and sequence/ need their group again in backward, which may run after the caller's handle is gone; a handle
// keeps its group alive).
#pragma once

#include <ATen/core/ivalue.h>

#include <utility>

#include "deepspeed/comm.h"

namespace deepspeed::comm {

struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(ProcessGroup g) : group(std::move(g)) {}
  ProcessGroup group;
};

// For ctx->saved_data["group"].
inline at::IValue group_capsule(const ProcessGroup& group) {
  return at::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(group));
}

// The group of a capsule made by group_capsule().
inline ProcessGroup& capsule_group(const at::IValue& capsule) {
  return c10::static_intrusive_pointer_cast<GroupCapsule>(capsule.toCapsule())->group;
}

}  // namespace deepspeed::comm
