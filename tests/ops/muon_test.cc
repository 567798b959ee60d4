// Muon's phases (deepspeed/ops/muon.h): the momentum's closed form, Newton-Schulz's defining property (the singular
// values of its output land in the quintic's band around 1 whatever the input's scale), the Gram form against the
// standard one, the tall orientation's scale, and bad input.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "deepspeed/error.h"
#include "deepspeed/ops/muon.h"
#include "tolerance.h"

namespace {

using deepspeed::ops::NewtonSchulz;

TEST(Muon, MomentumIsTheLerpAndTheUpdateIsNesterov) {
  // Exact in binary: beta 0.75, values that are multiples of 1/16.
  at::Tensor m = at::tensor({1.0f, -2.0f, 0.5f});
  const at::Tensor g = at::tensor({4.0f, 2.0f, -0.5f});
  const at::Tensor u = deepspeed::ops::muon_momentum(g, m, 0.75);
  // m = 0.75 m + 0.25 g; u = 0.25 g + 0.75 m.
  EXPECT_TRUE(at::equal(m, at::tensor({1.75f, -1.0f, 0.25f})));
  EXPECT_TRUE(at::equal(u, at::tensor({2.3125f, -0.25f, 0.0625f})));
  EXPECT_TRUE(at::equal(g, at::tensor({4.0f, 2.0f, -0.5f}))) << "the gradient is read, not written";
}

// The quintic's band (Jordan et al.): five rounds from a normalised matrix put every singular value that is not tiny
// into roughly [0.5, 1.5]; the input's scale is normalised away.
TEST(Muon, OrthogonalizeFlattensTheSpectrum) {
  at::manual_seed(3);
  for (const NewtonSchulz method : {NewtonSchulz::kStandard, NewtonSchulz::kGram}) {
    const at::Tensor g = at::randn({16, 48}) * 1e-3;
    const at::Tensor o = deepspeed::ops::muon_orthogonalize(g, 5, method);
    ASSERT_EQ(o.sizes(), g.sizes());
    const at::Tensor s = at::linalg_svdvals(o);
    EXPECT_GT(s.min().item<double>(), 0.5);
    EXPECT_LT(s.max().item<double>(), 1.5);
    const at::Tensor before = at::linalg_svdvals(g);
    EXPECT_GT((before.max() / before.min()).item<double>(), 3.0) << "the input's spectrum must not be flat already";
  }
}

// The Gram form evaluates the same polynomial: equal to the standard form to rounding, which the rounds amplify by
// at most the quintic's slope at zero (3.4445) per round.
TEST(Muon, GramFormEqualsTheStandardForm) {
  at::manual_seed(4);
  const at::Tensor g = at::randn({24, 96});
  const at::Tensor standard = deepspeed::ops::muon_orthogonalize(g, 5, NewtonSchulz::kStandard);
  const at::Tensor gram = deepspeed::ops::muon_orthogonalize(g, 5, NewtonSchulz::kGram);
  // 96-term dot products per matmul, a few matmuls per round, 5 rounds each amplifying by up to 3.4445.
  const double bound = tolerance::reordered(tolerance::kFp32Epsilon, 96, 5) * std::pow(3.4445, 5);
  EXPECT_WITHIN(tolerance::relative_max_error(gram, standard), bound);
  const at::Tensor none = deepspeed::ops::muon_orthogonalize(g, 0, NewtonSchulz::kGram);
  EXPECT_TRUE(at::allclose(none, g / (g.norm() + 1e-7))) << "zero rounds: the normalised input";
}

// A tall matrix is orthogonalized as its transpose and scaled by sqrt(rows / cols), so its update has the size a
// wide one of the same area gets per element.
TEST(Muon, TallMatricesAreScaledBySqrtOfTheirAspect) {
  at::manual_seed(5);
  const at::Tensor g = at::randn({64, 16});
  const at::Tensor tall = deepspeed::ops::muon_orthogonalize(g, 5, NewtonSchulz::kStandard);
  const at::Tensor wide = deepspeed::ops::muon_orthogonalize(g.t().contiguous(), 5, NewtonSchulz::kStandard);
  // The two multiply the same values laid out differently in memory: sums in another order, amplified as above.
  const double bound = tolerance::reordered(tolerance::kFp32Epsilon, 64, 5) * std::pow(3.4445, 5);
  EXPECT_WITHIN(tolerance::relative_max_error(tall, wide.t() * 2.0), bound);
}

TEST(Muon, RefusesBadInput) {
  EXPECT_THROW(deepspeed::ops::muon_orthogonalize(at::ones({8}), 5, NewtonSchulz::kGram), deepspeed::Error);
  EXPECT_THROW(deepspeed::ops::muon_orthogonalize(at::ones({2, 2}), -1, NewtonSchulz::kGram), deepspeed::Error);
  EXPECT_THROW(deepspeed::ops::muon_momentum(at::ones({3}), at::ones({4}), 0.9), deepspeed::Error);
  EXPECT_THROW(deepspeed::ops::muon_momentum(at::ones({3}), at::ones({3}), 1.0), deepspeed::Error);
  try {
    deepspeed::ops::newton_schulz_from_name("fast");
    ADD_FAILURE() << "an unknown ns_method must be refused";
  } catch (const deepspeed::Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"fast\""), std::string::npos) << e.what();
  }
}

}  // namespace
