// NumPy's legacy RandomState (numpy.random.RandomState(seed)) as far as Megatron's dataset indices use it: the
// Mersenne Twister seeded from one 32-bit integer and shuffle() of a 1-D array. Reproducing it draw for draw makes
// our sample order Megatron's for the same seed, so a run can move between the two with the same data order.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace deepspeed::data {

class NumpyRandomState {
 public:
  // numpy.random.RandomState(seed): MT19937 initialised by init_genrand(seed), which std::mt19937's one-value
  // constructor is too.
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  // A uniform integer in [0, max], as NumPy's random_interval: the draws masked to max's bit width and redrawn until
  // not above max (one 32-bit draw each below 2^32, else two, high word first).
  uint64_t interval(uint64_t max);

  // RandomState.shuffle of a 1-D array: Fisher-Yates from the end.
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[static_cast<size_t>(interval(i))]);
  }

 private:
  std::mt19937 mt_;
};

}  // namespace deepspeed::data
