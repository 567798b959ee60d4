#include "zero/partition.h"

#include <algorithm>

#include "deepspeed/error.h"

namespace deepspeed::zero {

int64_t PartitionLayout::padded_size(int64_t numel, int world_size) {
  DS_CHECK(world_size >= 1, "partition: world size must be >= 1, got ", world_size);
  const int64_t unit = kPartitionAlign * world_size;
  return (numel + unit - 1) / unit * unit;
}

PartitionLayout::PartitionLayout(int64_t numel, int world_size, int rank)
    : numel_(numel), world_(world_size), rank_(rank) {
  DS_CHECK(rank >= 0 && rank < world_size, "partition: rank ", rank, " outside world of ", world_size);
  partition_size_ = padded_size(numel, world_size) / world_size;
}

std::vector<Segment> PartitionLayout::owner_segments(int64_t begin, int64_t end) const {
  std::vector<Segment> out;
  if (partition_size_ == 0) return out;
  for (int64_t at = begin; at < end;) {
    int owner = owner_of(at);
    int64_t stop = std::min(end, this->end(owner));
    out.push_back({owner, at, stop});
    at = stop;
  }
  return out;
}

void append_master_fragments(size_t group, const std::vector<size_t>& indices, const std::vector<int64_t>& offsets,
                             const std::vector<std::vector<int64_t>>& shapes, int64_t part_begin, int64_t part_end,
                             int64_t base, std::vector<MasterFragment>& out) {
  for (size_t i = 0; i < offsets.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : shapes[i]) numel *= d;
    const int64_t lo = std::max(offsets[i], part_begin);
    const int64_t hi = std::min(offsets[i] + numel, part_end);
    if (lo >= hi) continue;
    out.push_back(MasterFragment{group, indices[i], shapes[i], lo - offsets[i], hi - offsets[i], base + lo - part_begin});
  }
}

}  // namespace deepspeed::zero
