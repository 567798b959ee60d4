#include <cstdint>
#include <numeric>
#include <vector>

#include "deepspeed/data.h"
#include "deepspeed/error.h"

namespace deepspeed {
namespace {

// splitmix64: a small, fully specified generator, so the permutation is the same with any standard library.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

DataParallelSampler::DataParallelSampler(int64_t dataset_size, int64_t micro_batch_size,
                                         int64_t gradient_accumulation_steps, int dp_rank, int dp_world_size,
                                         uint64_t seed, bool shuffle)
    : size_(dataset_size),
      micro_(micro_batch_size),
      gas_(gradient_accumulation_steps),
      rank_(dp_rank),
      world_(dp_world_size),
      seed_(seed),
      shuffle_(shuffle) {
  DS_CHECK(micro_ >= 1 && gas_ >= 1 && world_ >= 1, "sampler: micro batch (", micro_, "), accumulation steps (",
           gas_, ") and world size (", world_, ") must be >= 1");
  DS_CHECK(rank_ >= 0 && rank_ < world_, "sampler: rank ", rank_, " outside world of ", world_);
  DS_CHECK(size_ >= global_batch_size(), "sampler: dataset has ", size_, " samples, fewer than one global batch of ",
           global_batch_size(), " (micro ", micro_, " x accumulation ", gas_, " x world ", world_, ")");
  set_epoch(0);
}

void DataParallelSampler::set_epoch(int64_t epoch) {
  if (epoch == epoch_) return;
  epoch_ = epoch;
  order_.resize(size_);
  std::iota(order_.begin(), order_.end(), 0);
  if (!shuffle_) return;
  uint64_t state = seed_ * 0x2545F4914F6CDD1DULL + static_cast<uint64_t>(epoch);
  for (int64_t i = size_ - 1; i > 0; --i) {  // Fisher-Yates
    int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order_[i], order_[j]);
  }
}

void DataParallelSampler::ensure_epoch_for(int64_t step) {
  DS_CHECK(step >= 0, "sampler: step must be >= 0, got ", step);
  set_epoch(step / steps_per_epoch());
}

std::vector<int64_t> DataParallelSampler::micro_batch(int64_t step, int64_t micro_step) {
  DS_CHECK(micro_step >= 0 && micro_step < gas_, "sampler: micro_step ", micro_step, " outside 0..", gas_ - 1);
  ensure_epoch_for(step);
  int64_t base = (step % steps_per_epoch()) * global_batch_size() + (rank_ * gas_ + micro_step) * micro_;
  return std::vector<int64_t>(order_.begin() + base, order_.begin() + base + micro_);
}

std::vector<int64_t> DataParallelSampler::global_batch(int64_t step) {
  ensure_epoch_for(step);
  int64_t base = (step % steps_per_epoch()) * global_batch_size();
  return std::vector<int64_t>(order_.begin() + base, order_.begin() + base + global_batch_size());
}

}  // namespace deepspeed
