// The sequence-sharding step of Ulysses (deepspeed/sequence/shard.h), in one process, each rank's slice asked for in
// turn. Expected values come from plain tensor slicing of the whole batch, written out here:
//  - the slices in rank order rebuild the padded batch; the padding is pad_token_id with target -100;
//  - Hugging Face labels are shifted before the cut: the last position of one rank's slice has the first token of the
//    next rank's slice as its target (a shift after the cut would leave it without one), and the whole sequence's
//    last position has -100, as transformers' ForCausalLMLoss pads it;
//  - bad shapes and ranks are refused by name.
#include "deepspeed/sequence/shard.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace sq = deepspeed::sequence;

at::Tensor join(const std::vector<at::Tensor>& parts) { return at::cat(parts, 1); }

TEST(SequenceShard, SlicesInRankOrderRebuildThePaddedBatch) {
  const at::Tensor ids = at::arange(1, 1 + 2 * 7, at::kLong).view({2, 7});
  const at::Tensor targets = ids + 100;
  for (int size : {1, 2, 3, 4, 7, 8}) {
    SCOPED_TRACE(size);
    const int64_t padded = (7 + size - 1) / size * size;
    std::vector<at::Tensor> got_ids, got_labels;
    for (int rank = 0; rank < size; ++rank) {
      const sq::SequenceShard s = sq::shard_sequence(ids, targets, rank, size, {false, /*pad_token_id=*/9});
      EXPECT_EQ(s.padded_length, padded);
      EXPECT_EQ(s.first_position, rank * (padded / size));
      ASSERT_EQ(s.input_ids.sizes(), (at::IntArrayRef{2, padded / size}));
      got_ids.push_back(s.input_ids);
      got_labels.push_back(s.labels);
    }
    const at::Tensor want_ids = at::cat({ids, at::full({2, padded - 7}, 9, at::kLong)}, 1);
    const at::Tensor want_labels = at::cat({targets, at::full({2, padded - 7}, -100, at::kLong)}, 1);
    EXPECT_TRUE(at::equal(join(got_ids), want_ids));
    EXPECT_TRUE(at::equal(join(got_labels), want_labels));
  }
}

TEST(SequenceShard, HuggingFaceLabelsAreShiftedBeforeTheCut) {
  const at::Tensor ids = at::arange(10, 18, at::kLong).view({1, 8});
  const sq::SequenceShard first = sq::shard_sequence(ids, ids, 0, 2, {/*shift_labels=*/true});
  const sq::SequenceShard second = sq::shard_sequence(ids, ids, 1, 2, {/*shift_labels=*/true});
  // Position 3 (rank 0's last) learns token 14, which rank 1 holds.
  EXPECT_EQ(first.labels[0][3].item<int64_t>(), 14);
  EXPECT_TRUE(at::equal(first.input_ids, ids.narrow(1, 0, 4)));
  // transformers: labels padded with one -100 at the end, then shifted left by one.
  const at::Tensor want = at::cat({ids.narrow(1, 1, 7), at::full({1, 1}, -100, at::kLong)}, 1);
  EXPECT_TRUE(at::equal(join({first.labels, second.labels}), want));
  // An odd length at 2 ranks: the shift's -100 and the padding's.
  const at::Tensor odd = ids.narrow(1, 0, 5);
  const sq::SequenceShard tail = sq::shard_sequence(odd, odd, 1, 2, {true});
  EXPECT_TRUE(at::equal(tail.labels, at::tensor({14, -100, -100}, at::kLong).view({1, 3})));
}

TEST(SequenceShard, WithoutAGroupTheBatchIsWhole) {
  const at::Tensor ids = at::arange(6, at::kLong).view({1, 6});
  const sq::SequenceShard s = sq::shard_sequence(ids, ids + 1, deepspeed::comm::ProcessGroup());
  EXPECT_TRUE(at::equal(s.input_ids, ids));
  EXPECT_TRUE(at::equal(s.labels, ids + 1));
  EXPECT_EQ(s.first_position, 0);
}

TEST(SequenceShard, BadShapesAndRanksAreRefusedByName) {
  const at::Tensor ids = at::zeros({2, 6}, at::kLong);
  auto message = [&](const at::Tensor& a, const at::Tensor& b, int rank, int size) -> std::string {
    try {
      sq::shard_sequence(a, b, rank, size);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message(ids, at::zeros({2, 5}, at::kLong), 0, 2),
            "shard_sequence: input_ids [2, 6] and labels [2, 5] must both be [batch, seq]");
  EXPECT_EQ(message(ids.view({12}), ids.view({12}), 0, 2),
            "shard_sequence: input_ids [12] and labels [12] must both be [batch, seq]");
  EXPECT_EQ(message(ids, ids, 2, 2), "shard_sequence: rank 2 is not in a group of 2");
  EXPECT_EQ(message(ids.narrow(1, 0, 0), ids.narrow(1, 0, 0), 0, 2), "shard_sequence: the sequences are empty");
  EXPECT_EQ(message(ids, at::Tensor(), 0, 2), "shard_sequence: input_ids and labels must both be given");
}

}  // namespace
