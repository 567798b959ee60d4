// Column- and row-parallel linear layers, the vocabulary-parallel embedding and cross-entropy, at tensor-parallel
// size = world (2 and 4 ranks) against the plain torch::nn::Linear pair (Embedding, cross_entropy) they were sliced
// from, in every rank's own process: outputs, the input's gradient, and each
// rank's weight and bias gradients against the matching slice of the plain ones. A missing all-reduce in backward
// leaves the input gradient at one rank's share; a missing or doubled one in forward scales the output by 1/T or T;
// a bias added on every rank before the sum counts it T times; a wrong slice moves the output. Bad sizes are errors
// naming both numbers.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "tolerance.h"

namespace {

namespace dc = deepspeed::comm;
namespace tp = deepspeed::tp;

void ensure_comm() {
  if (!dc::is_initialized()) dc::init_distributed();
}

double rel(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).norm().item<double>() / (want.norm().item<double>() + 1e-30);
}

// This rank's slice of `t` along `dim`.
at::Tensor mine(const at::Tensor& t, int64_t dim) {
  const int64_t part = t.size(dim) / dc::get_world_size();
  return t.narrow(dim, dc::get_rank() * part, part);
}

// Sums of up to `hidden` products in another grouping (per rank, then across ranks) than one matmul.
double bound(int64_t hidden) { return tolerance::reordered(tolerance::kFp32Epsilon, hidden, 1); }

constexpr int64_t kIn = 12, kBatch = 5;

// overlap_comm (tp_overlap_comm) computes the column-parallel layer's gradients in its own backward with the input
// gradient's all-reduce in flight: the same checks hold.
class ColumnThenRow : public ::testing::TestWithParam<bool> {};

TEST_P(ColumnThenRow, EqualsThePlainLinearPair) {
  ensure_comm();
  const dc::ProcessGroup group = dc::get_world_group();
  const int64_t hidden = 8 * group.size();
  at::manual_seed(11);  // the same full layers and input on every rank
  torch::nn::Linear fc1(kIn, hidden), fc2(hidden, kIn);
  const at::Tensor x0 = at::randn({kBatch, 3, kIn});

  at::Tensor x = x0.clone().requires_grad_(true);
  at::Tensor want = fc2(torch::nn::functional::gelu(fc1(x)));
  (want * want).sum().backward();

  tp::ColumnParallelLinear col(fc1, group);
  col->overlap_comm = GetParam();
  tp::RowParallelLinear row(fc2, group);
  at::Tensor xt = x0.clone().requires_grad_(true);
  at::Tensor got = row(torch::nn::functional::gelu(col(xt)));
  (got * got).sum().backward();

  const double b = bound(hidden);
  EXPECT_WITHIN(rel(got, want), b) << "forward";
  EXPECT_WITHIN(rel(xt.grad(), x.grad()), b) << "input gradient (all-reduced in backward)";
  EXPECT_WITHIN(rel(col->weight.grad(), mine(fc1->weight.grad(), 0)), b);
  EXPECT_WITHIN(rel(col->bias.grad(), mine(fc1->bias.grad(), 0)), b);
  EXPECT_WITHIN(rel(row->weight.grad(), mine(fc2->weight.grad(), 1)), b);
  EXPECT_WITHIN(rel(row->bias.grad(), fc2->bias.grad()), b) << "the bias is added once, after the sum";
  EXPECT_EQ(col->weight.sizes(), (std::vector<int64_t>{hidden / group.size(), kIn}));
  EXPECT_EQ(row->weight.sizes(), (std::vector<int64_t>{kIn, hidden / group.size()}));
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, ColumnThenRow, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Overlapped" : "Plain"; });

TEST(TensorParallel, GatheredOutputsAndScatteredInputsAreTheWholeLayer) {
  ensure_comm();
  const dc::ProcessGroup group = dc::get_world_group();
  const int64_t hidden = 4 * group.size();
  at::manual_seed(12);
  torch::nn::Linear fc1(kIn, hidden), fc2(hidden, kIn);
  const at::Tensor x0 = at::randn({kBatch, kIn});
  const at::Tensor h0 = at::randn({kBatch, hidden});

  tp::ColumnParallelLinear col(fc1, group, /*gather_output=*/true);
  EXPECT_WITHIN(rel(col(x0), fc1(x0)), bound(kIn)) << "all output features, in rank order";
  tp::RowParallelLinear row(fc2, group, /*input_is_parallel=*/false);
  at::Tensor h = h0.clone().requires_grad_(true);
  at::Tensor ht = h0.clone().requires_grad_(true);
  fc2(h).sum().backward();
  row(ht).sum().backward();
  EXPECT_WITHIN(rel(ht.grad(), h.grad()), bound(kIn)) << "the scattered input's gradient, gathered back";

  // The slices reassemble to the full weight (rank order along the split dimension).
  at::Tensor all = at::empty({group.size() * col->weight.numel()});
  const_cast<dc::ProcessGroup&>(group).all_gather_into_tensor(all, col->weight.detach().contiguous().view(-1));
  EXPECT_TRUE(at::equal(all.view({hidden, kIn}), fc1->weight.detach()));
}

// The vocabulary split over the ranks: the embedding of every id (each rank's range and the others') equals the
// plain lookup, and each rank's weight gradient is the plain gradient's rows of its range; the cross-entropy of the
// split logits equals torch's on the whole logits, per position, and so do the gradients of each slice.
TEST(TensorParallel, VocabParallelEmbeddingAndCrossEntropyEqualThePlainOnes) {
  ensure_comm();
  const dc::ProcessGroup group = dc::get_world_group();
  const int64_t vocab = 6 * group.size(), dim = 5;
  at::manual_seed(13);
  const at::Tensor table = at::randn({vocab, dim});
  const at::Tensor ids = at::randint(vocab, {kBatch, 7}, at::kLong);
  const at::Tensor upstream = at::randn({kBatch, 7, dim});

  at::Tensor full = table.clone().requires_grad_(true);
  (at::embedding(full, ids) * upstream).sum().backward();
  tp::VocabParallelEmbedding emb(table, group);
  const at::Tensor got = emb(ids);
  (got * upstream).sum().backward();
  EXPECT_TRUE(at::equal(got, at::embedding(table, ids))) << "one rank holds each row: the sum adds zeros";
  EXPECT_TRUE(at::equal(emb->weight.grad(), mine(full.grad(), 0)));

  const at::Tensor logits0 = at::randn({kBatch, 7, vocab}) * 3;
  const at::Tensor weights = at::rand({kBatch, 7});  // a weighted sum, so each position's gradient scale is checked
  // Padding (-100, torch's ignore_index) at some positions: no loss, no gradient there, as torch's.
  const at::Tensor targets = ids.masked_fill(at::arange(kBatch * 7).view({kBatch, 7}).remainder(5).eq(0), -100);
  at::Tensor logits = logits0.clone().requires_grad_(true);
  const at::Tensor want =
      at::cross_entropy_loss(logits.view({-1, vocab}), targets.view(-1), {}, at::Reduction::None).view({kBatch, 7});
  (want * weights).sum().backward();
  at::Tensor slice = mine(logits0, 2).clone().requires_grad_(true);
  const at::Tensor loss = tp::vocab_parallel_cross_entropy(slice, targets, group);
  (loss * weights).sum().backward();
  EXPECT_WITHIN(rel(loss, want), bound(vocab)) << "per-position loss";
  EXPECT_WITHIN(rel(slice.grad(), mine(logits.grad(), 2)), bound(vocab)) << "this rank's slice of the gradient";
  EXPECT_TRUE(at::equal(loss.masked_select(targets.eq(-100)), at::zeros({7}))) << "the padded positions";
  // The mean over the positions that count, torch's cross_entropy "mean".
  const at::Tensor mean_want = at::cross_entropy_loss(logits0.view({-1, vocab}), targets.view(-1));
  EXPECT_WITHIN(rel(tp::vocab_parallel_cross_entropy_mean(mine(logits0, 2), targets, group), mean_want), bound(vocab));
  const std::string bad = [&] {
    try {
      tp::vocab_parallel_cross_entropy(slice, ids.view(-1), group);
    } catch (const deepspeed::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(bad.find("vocab_parallel_cross_entropy: target shape"), std::string::npos) << bad;
}

TEST(TensorParallel, FeaturesThatDoNotSplitAreNamed) {
  ensure_comm();
  const dc::ProcessGroup group = dc::get_world_group();
  const int64_t odd = 3 * group.size() + 1;
  auto message = [](auto&& build) {
    try {
      build();
    } catch (const deepspeed::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string col = message([&] { tp::ColumnParallelLinear(kIn, odd, true, group); });
  EXPECT_NE(col.find("ColumnParallelLinear: output features (" + std::to_string(odd) +
                     ") must divide by the tensor-parallel size (" + std::to_string(group.size()) + ")"),
            std::string::npos)
      << col;
  const std::string row = message([&] { tp::RowParallelLinear(odd, kIn, true, group); });
  EXPECT_NE(row.find("RowParallelLinear: input features (" + std::to_string(odd) + ")"), std::string::npos) << row;
  const std::string emb = message([&] { tp::VocabParallelEmbedding(odd, 4, group); });
  EXPECT_NE(emb.find("VocabParallelEmbedding: the vocabulary (" + std::to_string(odd) + ") must divide"),
            std::string::npos)
      << emb;
}

}  // namespace
