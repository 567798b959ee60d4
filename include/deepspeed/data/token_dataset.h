// What a training loop reads samples from: a fixed number of samples, each the same number of token ids (a GPT
// sample's inputs and, shifted by one, its targets). GPTDataset and BlendedDataset are ones; the loader
// (deepspeed/data/loader.h) hands each data-parallel rank its micro-batches from one.
#pragma once

#include <cstdint>

namespace deepspeed::data {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;
  // Token ids per sample.
  virtual int64_t sample_length() const = 0;
  // Sample `i` (0 <= i < size()) into `out` (sample_length() ids); DataError out of range. Safe from several threads.
  virtual void read(int64_t i, int64_t* out) const = 0;
};

}  // namespace deepspeed::data
