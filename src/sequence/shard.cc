// See deepspeed/sequence/shard.h.
#include "deepspeed/sequence/shard.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace deepspeed::sequence {

namespace {

void check_batch(const at::Tensor& input_ids, const at::Tensor& labels, int rank, int size) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("shard_sequence: " + what); };
  if (!input_ids.defined() || !labels.defined()) fail("input_ids and labels must both be given");
  if (input_ids.dim() != 2 || input_ids.sizes() != labels.sizes())
    fail(c10::str("input_ids ", input_ids.sizes(), " and labels ", labels.sizes(), " must both be [batch, seq]"));
  if (input_ids.size(1) < 1) fail("the sequences are empty");
  if (size < 1 || rank < 0 || rank >= size)
    fail("rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
}

}  // namespace

SequenceShard shard_sequence(const at::Tensor& input_ids, const at::Tensor& labels, int rank, int size,
                             const ShardOptions& options) {
  check_batch(input_ids, labels, rank, size);
  at::Tensor targets = labels;
  if (options.shift_labels)  // position t learns token t + 1; the last has none
    targets = at::constant_pad_nd(labels.narrow(1, 1, labels.size(1) - 1), {0, 1}, -100);
  const int64_t seq = input_ids.size(1), padded = (seq + size - 1) / size * size;
  at::Tensor ids = input_ids;
  if (padded != seq) {
    ids = at::constant_pad_nd(ids, {0, padded - seq}, options.pad_token_id);
    targets = at::constant_pad_nd(targets, {0, padded - seq}, -100);
  }
  const int64_t part = padded / size;
  SequenceShard shard;
  shard.first_position = rank * part;
  shard.padded_length = padded;
  shard.input_ids = ids.narrow(1, shard.first_position, part).contiguous();
  shard.labels = targets.narrow(1, shard.first_position, part).contiguous();
  return shard;
}

SequenceShard shard_sequence(const at::Tensor& input_ids, const at::Tensor& labels, const comm::ProcessGroup& group,
                             const ShardOptions& options) {
  const bool split = group.is_member() && group.size() > 1;
  return shard_sequence(input_ids, labels, split ? group.rank() : 0, split ? group.size() : 1, options);
}

}  // namespace deepspeed::sequence
