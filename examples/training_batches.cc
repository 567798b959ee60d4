#include "training_batches.h"

#include <ATen/ATen.h>

#include "corpus.h"
#include "deepspeed/data/blended_dataset.h"
#include "deepspeed/error.h"

namespace examples {

TrainingBatches::TrainingBatches(const std::string& text_path, const std::string& data_path, int64_t seq_len,
                                 int64_t steps, uint64_t seed, int64_t vocab, int64_t micro, int64_t gas, int dp_rank,
                                 int dp_size)
    : seq_len_(seq_len), vocab_(vocab), data_path_(data_path) {
  DS_CHECK(text_path.empty() || data_path.empty(), "give --data (byte-level text) or --data_path (tokenized corpora), ",
           "not both");
  if (data_path.empty()) {
    windows_ = make_windows(load_corpus(text_path), seq_len);
    sampler_.emplace(windows_.size(0), micro, gas, dp_rank, dp_size, seed);
    return;
  }
  deepspeed::data::GPTDatasetOptions options;
  options.sequence_length = seq_len;
  options.num_samples = steps * micro * gas * dp_size;
  options.seed = static_cast<uint32_t>(seed);
  dataset_ = deepspeed::data::build_gpt_dataset(data_path, options);
  loader_.emplace(dataset_, micro, gas, dp_rank, dp_size);
}

at::Tensor TrainingBatches::micro_batch(int64_t m) {
  if (loader_) {
    at::Tensor batch = loader_->micro_batch(m);
    const int64_t top = batch.max().item<int64_t>(), bottom = batch.min().item<int64_t>();
    DS_CHECK_T(deepspeed::DataError, bottom >= 0 && top < vocab_, "--data_path ", data_path_, ": token id ",
               top >= vocab_ ? top : bottom, " is outside the model's vocabulary of ", vocab_,
               " (a corpus tokenized for another model?)");
    return batch;
  }
  return windows_.index_select(0, at::tensor(sampler_->micro_batch(data_step_, m), at::kLong));
}

void TrainingBatches::next() {
  if (loader_) {
    loader_->advance();
  } else {
    ++data_step_;
  }
}

void TrainingBatches::resume(int64_t consumed_samples) {
  if (loader_) {
    loader_->set_consumed_samples(consumed_samples);
    return;
  }
  const int64_t batch = sampler_->global_batch_size();
  DS_CHECK(consumed_samples % batch == 0, "the checkpoint had consumed ", consumed_samples,
           " samples, not a whole number of global batches of ", batch,
           "; resume at a global batch that divides it (tokenized --data_path data resumes at any)");
  data_step_ = consumed_samples / batch;
}

std::string TrainingBatches::describe() const {
  if (loader_)
    return std::to_string(dataset_->size()) + " samples of " + std::to_string(seq_len_) + " tokens from " + data_path_;
  return std::to_string(windows_.size(0)) + " windows of " + std::to_string(seq_len_) + " byte-level tokens";
}

}  // namespace examples
