// The free list of a blocked KV cache's blocks (deepspeed/inference/ragged_engine.h): which of the cache's
// `num_blocks` blocks a sequence may write. A sequence takes its blocks when it is scheduled and gives them back when
// it finishes or is cancelled. Not thread-safe: the engine's stepping thread alone owns it.
#pragma once

#include <cstdint>
#include <vector>

namespace deepspeed::inference {

class KVBlockAllocator {
 public:
  explicit KVBlockAllocator(int64_t num_blocks);
  // Appends `count` free blocks to `blocks` and returns true; false (nothing taken) when fewer are free.
  bool allocate(int64_t count, std::vector<int64_t>& blocks);
  // Returns `blocks` to the free list and clears it. A block that is not taken is a bug (DS_ASSERT).
  void free(std::vector<int64_t>& blocks);
  int64_t total() const { return static_cast<int64_t>(taken_.size()); }
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  int64_t used() const { return total() - free_count(); }

 private:
  std::vector<int64_t> free_;  // a stack: the most recently freed block is reused first (its pages are warm)
  std::vector<bool> taken_;
};

}  // namespace deepspeed::inference
