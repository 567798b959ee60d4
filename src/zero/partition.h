// How a flat buffer is split among data-parallel ranks (ZeRO stages 1 and 2): the buffer is padded so that every
// rank owns one equal, 16-element-aligned partition [rank * size, (rank + 1) * size). A gradient bucket is any range
// of the buffer; its owner segments say which rank must receive the reduction of which sub-range.
#pragma once

#include <cstdint>
#include <vector>

namespace deepspeed::zero {

// Elements each partition is aligned to (64 bytes of fp32), so partition views stay SIMD-aligned.
constexpr int64_t kPartitionAlign = 16;

struct Segment {
  int owner;
  int64_t begin, end;  // [begin, end) in buffer coordinates
};

class PartitionLayout {
 public:
  PartitionLayout() = default;
  // `numel`: elements actually used; the buffer is padded up to padded_numel().
  PartitionLayout(int64_t numel, int world_size, int rank);

  // The smallest size >= numel that splits into `world_size` aligned partitions.
  static int64_t padded_size(int64_t numel, int world_size);

  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return partition_size_ * world_; }
  int64_t partition_size() const { return partition_size_; }
  int world_size() const { return world_; }
  int rank() const { return rank_; }
  int64_t begin(int rank) const { return rank * partition_size_; }
  int64_t end(int rank) const { return (rank + 1) * partition_size_; }
  int owner_of(int64_t index) const { return static_cast<int>(index / partition_size_); }

  // The pieces of [begin, end) by owning rank, in order.
  std::vector<Segment> owner_segments(int64_t begin, int64_t end) const;

 private:
  int64_t numel_ = 0;
  int64_t partition_size_ = 0;
  int world_ = 1;
  int rank_ = 0;
};

// The part of one parameter a rank's fp32 master buffer holds, as checkpoints describe it: elements [begin, end) of
// the flattened parameter `index` of parameter group `group` sit at element `offset` of the rank's master buffer of
// that group.
struct MasterFragment {
  size_t group = 0;
  size_t index = 0;
  std::vector<int64_t> shape;  // the whole parameter's
  int64_t begin = 0, end = 0;
  int64_t offset = 0;
};

// Appends the fragments of a flat buffer whose parameters start at `offsets` (parameter i is parameter
// `indices[i]` of `group`, `numels[i]` elements) when the rank holds buffer elements [part_begin, part_end), stored
// from element `base` of its master buffer. Parameters outside the range add nothing.
void append_master_fragments(size_t group, const std::vector<size_t>& indices, const std::vector<int64_t>& offsets,
                             const std::vector<std::vector<int64_t>>& shapes, int64_t part_begin, int64_t part_end, int64_t base,
                             std::vector<MasterFragment>& out);

}  // namespace deepspeed::zero
