// Tensor-parallel serving (deepspeed/inference/ragged_engine.h): rank 0 of the group schedules, and every pass's plan
// (the flat tokens and each sequence's start, length, logits flag and block table) goes to the other ranks as two
// broadcasts over the model's tensor-parallel group: a header [kind, payload length], then the payload of int64s.
// The others run the same forward pass on their heads' slices, so the collectives inside it line up.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "deepspeed/comm.h"
#include "inference/ragged_scheduler.h"

namespace deepspeed::inference {

// Rank 0 of `group`: sends one pass, or (`pass` nullptr) the end that makes followers' receive_pass return false.
void send_pass(comm::ProcessGroup& group, const RaggedPass* pass, const c10::Device& device);
// The other ranks: the next pass into `pass`; false when rank 0 has ended.
bool receive_pass(comm::ProcessGroup& group, RaggedPass& pass, const c10::Device& device);

}  // namespace deepspeed::inference
