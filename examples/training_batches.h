// The examples' training batches, from one of two sources: byte-level text (--data FILE, or the licence texts every
// Debian machine ships; vocabulary 256, windows drawn by deepspeed::DataParallelSampler) or tokenized corpora
// (--data_path, Megatron's "PREFIX" or "W1 PREFIX1 W2 PREFIX2 ...": deepspeed/data/, a GPTDataset or blend of them
// asked for steps x global batch samples, read in order by a SampleLoader), or fine-tuning pairs (--sft_data_path,
// ds_preprocess --sft output: deepspeed/data/sft_dataset.h, targets -100 on the prompt). Either way a resumed run goes
// on from the samples the engine had consumed (Engine::global_samples(), saved in its checkpoints), whatever the
// world size.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "deepspeed/data.h"
#include "deepspeed/data/curriculum.h"
#include "deepspeed/data/sample_loader.h"

namespace examples {

struct Batch {
  at::Tensor inputs;   // [micro, seq_len]
  at::Tensor targets;  // [micro, seq_len]: the next token at each position, -100 where the loss does not count
};

class TrainingBatches {
 public:
  // `vocab`: the model's vocabulary; a token id outside it is refused by data path. Throws (DataError,
  // std::runtime_error) naming the file for unreadable data.
  // The batch layout is the engine's: micro-batch per rank, accumulation steps, this rank's place among the
  // data-parallel ranks.
  // At most one of text_path, data_path and sft_path is given (none: the default text).
  TrainingBatches(const std::string& text_path, const std::string& data_path, const std::string& sft_path,
                  int64_t seq_len, int64_t steps, uint64_t seed, int64_t vocab, int64_t micro, int64_t gas, int dp_rank,
                  int dp_size);

  // DeepSpeed's sequence-length curriculum of `config`, when it enables one (deepspeed/data/curriculum.h): each
  // step's batches are then cut to the schedule's length. With it, call begin_step before each step's micro-batches.
  void use_curriculum(const deepspeed::Config& config);
  // The optimizer step the next micro-batches train (engine.global_steps() + 1): the curriculum's length for it.
  void begin_step(int64_t global_step);
  bool has_curriculum() const { return curriculum_ != nullptr; }

  // This rank's micro-batch `m` of the current global batch.
  Batch micro_batch(int64_t m);
  // The global batch is done.
  void next();
  // Continue after `consumed_samples` samples (a checkpoint's Engine::global_samples()).
  void resume(int64_t consumed_samples);
  // "N windows of byte-level text" or "M samples of the data path ...", for the start-up line.
  std::string describe() const;

 private:
  int64_t seq_len_, vocab_;
  std::string data_path_;
  bool sft_ = false;
  // Text: the windows, their sampler, and the data step.
  at::Tensor windows_;
  std::optional<deepspeed::DataParallelSampler> sampler_;
  int64_t data_step_ = 0;
  // Tokenized corpora.
  std::shared_ptr<const deepspeed::data::TokenDataset> dataset_;
  std::optional<deepspeed::data::SampleLoader> loader_;
  std::unique_ptr<deepspeed::data::SeqlenCurriculum> curriculum_;  // null: whole sequences
};

}  // namespace examples
