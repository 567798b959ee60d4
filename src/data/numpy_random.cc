// NumpyRandomState (numpy_random.h).
#include "data/numpy_random.h"

namespace deepspeed::data {

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  uint64_t value = 0;
  if (max <= 0xffffffffULL) {
    do {
      value = static_cast<uint64_t>(mt_()) & mask;
    } while (value > max);
  } else {
    do {
      const uint64_t hi = mt_();
      value = ((hi << 32) | static_cast<uint64_t>(mt_())) & mask;
    } while (value > max);
  }
  return value;
}

}  // namespace deepspeed::data
