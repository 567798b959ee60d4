// deepspeed::data::SampleLoader: every layout (world size, micro-batch, accumulation) reads a global batch's samples
// in the dataset's order, so a run stopped after k global batches and resumed at another layout reads exactly the
// samples an uninterrupted run reads next. The dataset here records which positions were read.
#include "deepspeed/data/sample_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "deepspeed/error.h"

namespace {

namespace dd = deepspeed::data;

// Sample i is {i, i, i}: a batch shows which positions it came from.
class Positions : public dd::TokenDataset {
 public:
  explicit Positions(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  int64_t sample_length() const override { return 3; }
  void read(int64_t i, int64_t* out) const override {
    if (i < 0 || i >= n_) throw deepspeed::DataError("sample " + std::to_string(i));
    std::fill(out, out + 3, i);
  }

 private:
  int64_t n_;
};

struct Layout {
  int64_t micro, gas;
  int dp;
};

// The positions every rank reads in the next `steps` global batches, batch by batch, sorted within a batch (ranks
// and micro-steps run concurrently; only the batch's set matters to a step's gradient).
std::vector<std::vector<int64_t>> run(const std::shared_ptr<const dd::TokenDataset>& data, Layout l, int64_t consumed,
                                      int64_t steps, int64_t* consumed_after) {
  std::vector<dd::SampleLoader> ranks;
  for (int r = 0; r < l.dp; ++r) ranks.emplace_back(data, l.micro, l.gas, r, l.dp, consumed);
  std::vector<std::vector<int64_t>> batches;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> batch;
    for (auto& loader : ranks) {
      for (int64_t m = 0; m < l.gas; ++m) {
        at::Tensor t = loader.micro_batch(m);
        EXPECT_EQ(t.size(0), l.micro);
        for (int64_t i = 0; i < t.size(0); ++i) batch.push_back(t[i][0].item<int64_t>());
      }
      loader.advance();
    }
    std::sort(batch.begin(), batch.end());
    batches.push_back(batch);
  }
  *consumed_after = ranks.front().consumed_samples();
  return batches;
}

TEST(SampleLoader, ResumesAtTheNextSampleAtAnyLayout) {
  auto data = std::make_shared<Positions>(200);
  int64_t consumed = 0;
  // Uninterrupted: one rank, micro-batch 4, 2 accumulation steps: global batches of 8.
  const auto whole = run(data, {4, 2, 1}, 0, 6, &consumed);
  EXPECT_EQ(consumed, 48);
  for (int64_t s = 0; s < 6; ++s) {
    std::vector<int64_t> want(8);
    for (int64_t i = 0; i < 8; ++i) want[static_cast<size_t>(i)] = 8 * s + i;
    EXPECT_EQ(whole[static_cast<size_t>(s)], want) << "step " << s;
  }
  // Stopped after 3 batches (consumed 24), resumed at 2 ranks x micro 2 x accumulation 2 and at 4 ranks x micro 1
  // x accumulation 2: the same batches as the uninterrupted run's last 3.
  for (Layout l : {Layout{2, 2, 2}, Layout{1, 2, 4}, Layout{8, 1, 1}}) {
    const auto resumed = run(data, l, 24, 3, &consumed);
    EXPECT_EQ(consumed, 48);
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(resumed[static_cast<size_t>(s)], whole[static_cast<size_t>(3 + s)]);
  }
  // At another global batch (2 ranks x micro 3: 6 per step) the stream goes on from sample 24 without a gap or a
  // repeat.
  const auto other = run(data, {3, 1, 2}, 24, 4, &consumed);
  for (int64_t s = 0; s < 4; ++s) {
    std::vector<int64_t> want(6);
    for (int64_t i = 0; i < 6; ++i) want[static_cast<size_t>(i)] = 24 + 6 * s + i;
    EXPECT_EQ(other[static_cast<size_t>(s)], want) << "step " << s;
  }
}

TEST(SampleLoader, RefusesToRunPastTheDatasetOrStartOutsideIt) {
  auto data = std::make_shared<Positions>(20);
  dd::SampleLoader loader(data, 4, 1, 0, 2);
  EXPECT_EQ(loader.batches_left(), 2);
  loader.advance();
  loader.advance();
  try {
    loader.micro_batch(0);
    ADD_FAILURE() << "read past the dataset";
  } catch (const deepspeed::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 20 samples and 16 are consumed"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dd::SampleLoader(data, 4, 1, 0, 2, 21), deepspeed::DataError);
  EXPECT_THROW(dd::SampleLoader(data, 4, 1, 2, 2), deepspeed::DataError);
  EXPECT_THROW(dd::SampleLoader(data, 0, 1, 0, 1), deepspeed::DataError);
}

}  // namespace
