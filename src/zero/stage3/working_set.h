// How much stage 3 holds gathered and in flight, sized from the model it partitions.
//
// DeepSpeed's defaults (stage3_max_live_parameters and stage3_max_reuse_distance 1e9, reduce_bucket_size 5e8,
// stage3_prefetch_bucket_size 5e7) were set for models of billions of parameters, where 1e9 live parameters is about
// an eighth of a 7B model. On a smaller model the same numbers hold the whole model gathered (every unit is reused
// within 1e9 elements, so forward keeps them all for backward) and every unit's gradient in flight: stage 3 then
// uses more memory than stage 2, which holds the parameters whole but nothing besides. So the config's values stay
// what they are, and act as upper bounds: the engine holds at most
//   - gathered: max(two of the largest units, an eighth of the partitioned parameters) elements (the unit in use
//     and the next one prefetched, or DeepSpeed's proportion on a large model);
//   - gradients in flight (the unit being accumulated and the reductions still travelling): max(the largest unit,
//     an eighth of the partitioned parameters), so a small model reduces one unit before the next accumulates.
// On a 7B model the live bound becomes an eighth, 875M elements, against DeepSpeed's 1e9, and the reduce bucket
// stays 5e8; from 8B parameters on, DeepSpeed's values stand. On the 25M GPT of
// bench/zero at 2 ranks they keep two of its eight blocks gathered instead of all eight, and one block's gradients
// instead of three. Measured there (2 ranks, 30 steps): peak RSS ~770 MB against ~890 MB, at 0.92x the tokens/s
// of keeping everything gathered (backward gathers six blocks again).
#pragma once

#include <cstdint>

namespace deepspeed::zero {

struct WorkingSet {
  int64_t max_live_elems = 0;       // gathered unit elements held at once (prefetched and kept ones included)
  int64_t reduce_bucket_elems = 0;  // gradient elements accumulating or reducing at once
};

// `configured`: the config's values; `largest_unit` and `partitioned`: the elements of the largest unit and of all
// units gathered on demand (not the persistent ones).
WorkingSet size_working_set(const WorkingSet& configured, int64_t largest_unit, int64_t partitioned);

}  // namespace deepspeed::zero
