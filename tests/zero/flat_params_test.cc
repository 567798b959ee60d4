// Flat parameter groups: values survive flattening, params and grads are views of the buffers, autograd
// accumulates into the flat gradient buffer, and bad groups are rejected.
#include "zero/flat_params.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "deepspeed/error.h"

namespace deepspeed::zero {
namespace {

TEST(FlatParams, ParamsAndGradsBecomeViewsWithValuesKept) {
  at::manual_seed(0);
  at::Tensor w = at::randn({3, 4}).requires_grad_(true);
  at::Tensor b = at::randn({4}).requires_grad_(true);
  at::Tensor w0 = w.detach().clone(), b0 = b.detach().clone();
  std::vector<FlatGroup> groups(1);
  groups[0].params = {w, b};
  flatten_into(groups);
  EXPECT_EQ(groups[0].numel(), 32);  // each parameter starts on a 16-element (64-byte) boundary
  EXPECT_TRUE(at::equal(w, w0));
  EXPECT_TRUE(at::equal(b, b0));
  EXPECT_EQ(w.data_ptr<float>(), groups[0].params_flat.data_ptr<float>());
  EXPECT_EQ(b.data_ptr<float>(), groups[0].params_flat.data_ptr<float>() + 16);

  // Two backward passes accumulate into the flat gradient buffer.
  at::Tensor x = at::randn({2, 3});
  for (int i = 0; i < 2; ++i) at::matmul(x, w).add(b).sum().backward();
  at::Tensor expected_w = 2 * at::matmul(x.t(), at::ones({2, 4}));
  // Each gradient element is a sum of two products with 1 (order-free, exact) accumulated twice (g + g = 2g,
  // exact): bit equality.
  EXPECT_TRUE(at::equal(groups[0].grads_flat.narrow(0, 0, 12).view({3, 4}), expected_w));
  EXPECT_TRUE(at::equal(groups[0].grads_flat.narrow(0, 16, 4), at::full({4}, 4.0)));

  zero_grads(groups);
  EXPECT_EQ(groups[0].grads_flat.abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(w.grad().data_ptr<float>(), groups[0].grads_flat.data_ptr<float>());
}

TEST(FlatParams, UpdatingTheFlatBufferUpdatesTheParameters) {
  at::Tensor w = at::zeros({5}).requires_grad_(true);
  std::vector<FlatGroup> groups(1);
  groups[0].params = {w};
  flatten_into(groups);
  groups[0].params_flat.narrow(0, 0, 5).fill_(3.0);
  EXPECT_TRUE(at::equal(w, at::full({5}, 3.0)));
}

TEST(FlatParams, DroppedGradIsReattached) {
  at::Tensor w = at::ones({2}).requires_grad_(true);
  std::vector<FlatGroup> groups(1);
  groups[0].params = {w};
  flatten_into(groups);
  w.mutable_grad() = at::Tensor();
  ensure_grad_views(groups);
  (w * 2).sum().backward();
  EXPECT_TRUE(at::equal(groups[0].grads_flat.narrow(0, 0, 2), at::full({2}, 2.0)));
}

TEST(FlatParams, RejectsBadGroups) {
  std::vector<FlatGroup> empty(1);
  EXPECT_THROW(flatten_into(empty), deepspeed::Error);

  at::Tensor p = at::ones({2}).requires_grad_(true);
  std::vector<FlatGroup> twice(2);
  twice[0].params = {p};
  twice[1].params = {p};
  EXPECT_THROW(flatten_into(twice), deepspeed::Error);

  std::vector<FlatGroup> doubles(1);
  doubles[0].params = {at::ones({2}, at::kDouble).requires_grad_(true)};
  try {
    flatten_into(doubles);
    FAIL() << "expected an error for a double parameter";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Double"), std::string::npos) << e.what();
  }

  std::vector<FlatGroup> frozen(1);
  frozen[0].params = {at::ones({2})};
  EXPECT_THROW(flatten_into(frozen), deepspeed::Error);
}

}  // namespace
}  // namespace deepspeed::zero
