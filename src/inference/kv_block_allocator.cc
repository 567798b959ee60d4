// See kv_block_allocator.h.
#include "inference/kv_block_allocator.h"

#include "deepspeed/error.h"

namespace deepspeed::inference {

KVBlockAllocator::KVBlockAllocator(int64_t num_blocks) : taken_(static_cast<size_t>(num_blocks), false) {
  DS_CHECK(num_blocks >= 1, "KV cache: needs at least one block, got ", num_blocks);
  // Highest first on the stack, so blocks are handed out 0, 1, 2, ...
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool KVBlockAllocator::allocate(int64_t count, std::vector<int64_t>& blocks) {
  if (count > free_count()) return false;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t b = free_.back();
    free_.pop_back();
    taken_[static_cast<size_t>(b)] = true;
    blocks.push_back(b);
  }
  return true;
}

void KVBlockAllocator::free(std::vector<int64_t>& blocks) {
  for (const int64_t b : blocks) {
    DS_ASSERT(b >= 0 && b < total() && taken_[static_cast<size_t>(b)], "KV cache: block ", b, " freed but not taken");
    taken_[static_cast<size_t>(b)] = false;
    free_.push_back(b);
  }
  blocks.clear();
}

}  // namespace deepspeed::inference
