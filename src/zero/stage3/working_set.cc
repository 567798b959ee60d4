#include "zero/stage3/working_set.h"

#include <algorithm>

namespace deepspeed::zero {

WorkingSet size_working_set(const WorkingSet& configured, int64_t largest_unit, int64_t partitioned) {
  const int64_t eighth = partitioned / 8;
  return {std::min(configured.max_live_elems, std::max(2 * largest_unit, eighth)),
          std::min(configured.reduce_bucket_elems, std::max(largest_unit, eighth))};
}

}  // namespace deepspeed::zero
