// The data half of Ulysses: each of the P ranks of a sequence-parallel group trains on its own consecutive slice of
// every sequence of the batch (DeepSpeed's UlyssesSPDataLoaderAdapter). Labels are shifted to the next token BEFORE
// the sequence is cut, so the last position of one rank's slice still has the first token of the next rank's slice
// as its target (shifting after the cut would lose P - 1 targets per sequence). Sequences whose length P does not
// divide are padded at the end with pad_token_id and target -100 (ignored by the loss; under causal attention no real
// position sees the padding), so every batch may have its own length (DeepSpeed's seq_length_is_variable: nothing is
// sized once for a fixed length here).
//
//   auto shard = deepspeed::sequence::shard_sequence(input_ids, targets, sp_group);
//   at::Tensor loss = engine.forward(shard.input_ids, shard.labels);  // a model built over sp_group
//
// The model's loss must then be the mean over the whole sequences' counted positions (deepspeed/sequence/loss.h),
// since padding and SFT masks leave the ranks uneven counts.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "deepspeed/comm.h"

namespace deepspeed::sequence {

struct ShardOptions {
  // true: `labels` are Hugging Face's (equal to the inputs at each position; the model shifts them): they are shifted
  // one position left first, the last position -100. false: they already hold each position's next token (our
  // datasets' targets).
  bool shift_labels = false;
  int64_t pad_token_id = 0;  // the input id written into the padding
};

struct SequenceShard {
  at::Tensor input_ids;        // [batch, padded_length / P]: this rank's positions
  at::Tensor labels;           // [batch, padded_length / P]: their targets, -100 on padding
  int64_t first_position = 0;  // this slice's first position in the whole sequence (rotary / learned positions)
  int64_t padded_length = 0;   // the sequence length after padding to a multiple of P
};

// Rank `rank` of `size`'s slice of input_ids and labels [batch, seq] (same shape; seq >= 1). std::invalid_argument
// naming the shapes or the rank when they are wrong.
SequenceShard shard_sequence(const at::Tensor& input_ids, const at::Tensor& labels, int rank, int size,
                             const ShardOptions& options = {});

// This rank's slice in `group` (the whole batch when the handle is null or the group has one rank).
SequenceShard shard_sequence(const at::Tensor& input_ids, const at::Tensor& labels, const comm::ProcessGroup& group,
                             const ShardOptions& options = {});

}  // namespace deepspeed::sequence
