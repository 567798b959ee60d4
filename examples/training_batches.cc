#include "training_batches.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <tuple>

#include "corpus.h"
#include "deepspeed/data/blended_dataset.h"
#include "deepspeed/data/sft_dataset.h"
#include "deepspeed/error.h"

namespace examples {

TrainingBatches::TrainingBatches(const std::string& text_path, const std::string& data_path,
                                 const std::string& sft_path, int64_t seq_len, int64_t steps, uint64_t seed,
                                 int64_t vocab, int64_t micro, int64_t gas, int dp_rank, int dp_size)
    : seq_len_(seq_len), vocab_(vocab), data_path_(sft_path.empty() ? data_path : sft_path), sft_(!sft_path.empty()) {
  DS_CHECK(static_cast<int>(!text_path.empty()) + static_cast<int>(!data_path.empty()) +
                   static_cast<int>(!sft_path.empty()) <=
               1,
           "give one of --data (byte-level text), --data_path (tokenized corpora) and --sft_data_path (fine-tuning "
           "pairs)");
  if (sft_) {
    deepspeed::data::SftDatasetOptions options;
    options.sequence_length = seq_len;
    options.num_samples = steps * micro * gas * dp_size;
    options.seed = static_cast<uint32_t>(seed);
    dataset_ = std::make_shared<deepspeed::data::SftDataset>(sft_path, options);
    loader_.emplace(dataset_, micro, gas, dp_rank, dp_size);
    return;
  }
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

Batch TrainingBatches::micro_batch(int64_t m) {
  at::Tensor batch;
  if (loader_) {
    batch = loader_->micro_batch(m);
    at::Tensor ids = sft_ ? batch.narrow(1, 0, seq_len_) : batch;  // an SFT sample's targets hold -100s
    const int64_t top = ids.max().item<int64_t>(), bottom = ids.min().item<int64_t>();
    DS_CHECK_T(deepspeed::DataError, bottom >= 0 && top < vocab_, data_path_, ": token id ",
               top >= vocab_ ? top : bottom, " is outside the model's vocabulary of ", vocab_,
               " (a corpus tokenized for another model?)");
  } else {
    batch = windows_.index_select(0, at::tensor(sampler_->micro_batch(data_step_, m), at::kLong));
  }
  // A window holds seq_len + 1 tokens (targets: shifted by one); an SFT sample its inputs, then its targets.
  Batch out{batch.narrow(1, 0, seq_len_), batch.narrow(1, sft_ ? seq_len_ : 1, seq_len_)};
  if (curriculum_) std::tie(out.inputs, out.targets) = curriculum_->truncate(out.inputs, out.targets);
  return out;
}

void TrainingBatches::use_curriculum(const deepspeed::Config& config) {
  curriculum_ = deepspeed::data::SeqlenCurriculum::from_config(config);
}

void TrainingBatches::begin_step(int64_t global_step) {
  if (curriculum_) curriculum_->update(global_step);
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
  const std::string cut = curriculum_ ? " (cut by the sequence-length curriculum)" : "";
  if (sft_)
    return std::to_string(dataset_->size()) + " fine-tuning samples of " + std::to_string(seq_len_) + " tokens from " +
           data_path_ + cut;
  if (loader_)
    return std::to_string(dataset_->size()) + " samples of " + std::to_string(seq_len_) + " tokens from " + data_path_ +
           cut;
  return std::to_string(windows_.size(0)) + " windows of " + std::to_string(seq_len_) + " byte-level tokens" + cut;
}

}  // namespace examples
