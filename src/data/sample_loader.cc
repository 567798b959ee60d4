// SampleLoader (deepspeed/data/sample_loader.h).
#include "deepspeed/data/sample_loader.h"

#include <ATen/ATen.h>

#include "deepspeed/error.h"

namespace deepspeed::data {

SampleLoader::SampleLoader(std::shared_ptr<const TokenDataset> dataset, int64_t micro_batch_size,
                           int64_t gradient_accumulation_steps, int dp_rank, int dp_size, int64_t consumed_samples)
    : dataset_(std::move(dataset)),
      micro_(micro_batch_size),
      gas_(gradient_accumulation_steps),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      consumed_(0) {
  DS_CHECK_T(DataError, dataset_ != nullptr, "SampleLoader: no dataset");
  DS_CHECK_T(DataError, micro_ > 0 && gas_ > 0 && dp_size_ > 0 && dp_rank_ >= 0 && dp_rank_ < dp_size_,
             "SampleLoader: micro-batch ", micro_, ", accumulation ", gas_, ", data-parallel rank ", dp_rank_, " of ",
             dp_size_);
  set_consumed_samples(consumed_samples);
}

void SampleLoader::set_consumed_samples(int64_t consumed) {
  DS_CHECK_T(DataError, consumed >= 0 && consumed <= dataset_->size(), "consumed_samples ", consumed,
             " is outside the dataset's ", dataset_->size(), " samples (a checkpoint of another dataset?)");
  consumed_ = consumed;
}

int64_t SampleLoader::batches_left() const { return (dataset_->size() - consumed_) / global_batch_size(); }

int64_t SampleLoader::first_position(int64_t micro_step) const {
  DS_CHECK_T(DataError, micro_step >= 0 && micro_step < gas_, "micro-step ", micro_step, " of ", gas_);
  return consumed_ + (micro_step * dp_size_ + dp_rank_) * micro_;
}

at::Tensor SampleLoader::micro_batch(int64_t micro_step) const {
  DS_CHECK_T(DataError, consumed_ + global_batch_size() <= dataset_->size(), "the dataset holds ", dataset_->size(),
             " samples and ", consumed_, " are consumed: no whole global batch of ", global_batch_size(),
             " is left (ask the dataset for more samples, or train fewer steps)");
  const int64_t first = first_position(micro_step), length = dataset_->sample_length();
  at::Tensor out = at::empty({micro_, length}, at::kLong);
  int64_t* p = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < micro_; ++i) dataset_->read(first + i, p + i * length);
  return out;
}

}  // namespace deepspeed::data
