// ops::PackedLinear (deepspeed/ops/packed_linear.h): oneDNN's inner product on a weight packed once, against
// LibTorch's at::linear in double precision. The bugs it is for: a wrong layout or transpose in the packing (every
// value off by O(1)), a bias dropped, a packed copy gone stale after the weight changed in place (directly, or
// through the parameters a stacked weight shares storage with), and packing where it must not (a dtype or device
// oneDNN's CPU linear does not take, or DS_PACKED_LINEAR=0).
#include "deepspeed/ops/packed_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <string>

#include "scoped_env.h"
#include "tolerance.h"

namespace {

using deepspeed::ops::PackedLinear;
namespace tol = tolerance;

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::linear(x.to(at::kDouble), w.to(at::kDouble), b.defined() ? b.to(at::kDouble) : at::Tensor());
}

TEST(PackedLinear, MatchesLinearAtEveryRowCountWithAndWithoutBias) {
  at::manual_seed(0);
  constexpr int64_t in = 384, out = 192;
  const at::Tensor w = at::randn({out, in});
  const at::Tensor b = at::randn({out});
  for (const bool with_bias : {false, true}) {
    PackedLinear packed;
    packed.pack(w, with_bias ? b : at::Tensor());
    ASSERT_TRUE(packed.packed());
    for (const int64_t rows : {1, 2, 3, 8, 17, 130}) {
      SCOPED_TRACE(rows);
      const at::Tensor x = at::randn({rows, in});
      const at::Tensor got = packed(x);
      ASSERT_EQ(got.sizes(), (at::IntArrayRef{rows, out}));
      ASSERT_EQ(got.scalar_type(), at::kFloat);
      // Each output is one sum of `in` products (plus the bias), in another order than the reference's.
      EXPECT_WITHIN(tol::relative_max_error(got, reference(x, w, with_bias ? b : at::Tensor())),
                    tol::reordered(tol::kFp32Epsilon, in + 1, 1));
    }
  }
}

TEST(PackedLinear, TakesBatchedInputsAndBfloat16) {
  at::manual_seed(1);
  const at::Tensor w = at::randn({256, 256});
  PackedLinear packed;
  packed.pack(w, {});
  const at::Tensor x = at::randn({2, 5, 256});
  const at::Tensor got = packed(x);
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{2, 5, 256}));
  EXPECT_WITHIN(tol::relative_max_error(got, reference(x, w, {})), tol::reordered(tol::kFp32Epsilon, 256, 1));

  const at::Tensor wb = w.to(at::kBFloat16), xb = x.to(at::kBFloat16);
  PackedLinear packed_bf16;
  packed_bf16.pack(wb, {});
  // oneDNN's bfloat16 kernels need AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: not at the suite's AVX2 level.
  const bool bf16 =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_is_mkldnn_bf16_supported", "").typed<bool()>().call();
  ASSERT_EQ(packed_bf16.packed(), bf16);
  if (!bf16) return;
  const at::Tensor gotb = packed_bf16(xb);
  ASSERT_EQ(gotb.scalar_type(), at::kBFloat16);
  // Products of bfloat16 inputs summed in float, the result rounded once to bfloat16.
  EXPECT_WITHIN(tol::relative_max_error(gotb, reference(xb, wb, {})),
                tol::kBf16Epsilon + tol::reordered(tol::kFp32Epsilon, 256, 1));
}

TEST(PackedLinear, FollowsInPlaceChangesToTheWeight) {
  at::manual_seed(2);
  at::Tensor w = at::randn({256, 256});
  PackedLinear packed;
  packed.pack(w, {});
  ASSERT_TRUE(packed.packed());
  const at::Tensor x = at::randn({4, 256});
  {
    at::NoGradGuard no_grad;
    w.mul_(-3.0);  // a checkpoint load or an optimizer step would do the same
  }
  EXPECT_WITHIN(tol::relative_max_error(packed(x), reference(x, w, {})), tol::reordered(tol::kFp32Epsilon, 256, 1));
}

// As LlamaForCausalLMImpl::inject_kernels stacks q, k and v: the parameters become views of one tensor through
// set_data, so a write to a parameter reaches the stacked weight's storage but not its version counter.
TEST(PackedLinear, FollowsInPlaceChangesToTheTensorsAStackedWeightIsMadeOf) {
  at::manual_seed(3);
  at::Tensor a = at::randn({200, 256}), b = at::randn({56, 256});
  const at::Tensor stacked = at::cat({a, b}, 0);
  a.set_data(stacked.narrow(0, 0, 200));
  b.set_data(stacked.narrow(0, 200, 56));
  PackedLinear packed;
  packed.pack(stacked, {}, {a, b});
  ASSERT_TRUE(packed.packed());
  const at::Tensor x = at::randn({3, 256});
  {
    at::NoGradGuard no_grad;
    b.add_(1.0);
  }
  ASSERT_EQ(stacked.narrow(0, 200, 56).sum().item<double>(), b.sum().item<double>());  // the storage is shared
  EXPECT_WITHIN(tol::relative_max_error(packed(x), reference(x, stacked, {})),
                tol::reordered(tol::kFp32Epsilon, 256, 1));
}

TEST(PackedLinear, PacksNothingItCannotOrMayNot) {
  ScopedEnv unset("DS_PACKED_LINEAR", std::nullopt);
  for (const at::ScalarType t : {at::kDouble, at::kHalf}) {
    PackedLinear p;
    p.pack(at::ones({256, 256}, t), {});
    EXPECT_FALSE(p.packed()) << t;
  }
  PackedLinear vector;
  vector.pack(at::ones({65536}), {});
  EXPECT_FALSE(vector.packed());
  EXPECT_THROW(vector(at::ones({1, 65536})), std::exception);  // a caller that skipped packed() hears of it
  PackedLinear small, large;
  small.pack(at::ones({255, 256}), {});  // under 65,536 elements: MKL's copy is cheaper than oneDNN's call
  large.pack(at::ones({256, 256}), {});
  EXPECT_FALSE(small.packed());
  EXPECT_TRUE(large.packed());
  {
    ScopedEnv off("DS_PACKED_LINEAR", "0");
    PackedLinear p;
    p.pack(at::ones({256, 256}), {});
    EXPECT_FALSE(p.packed());
  }
  {
    ScopedEnv bad("DS_PACKED_LINEAR", "yes");
    PackedLinear p;
    try {
      p.pack(at::ones({256, 256}), {});
      ADD_FAILURE() << "DS_PACKED_LINEAR=yes was taken";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("DS_PACKED_LINEAR must be 0"), std::string::npos) << e.what();
    }
  }
  ScopedEnv all("DS_PACKED_LINEAR", "1");
  PackedLinear forced;
  forced.pack(at::ones({4, 4}), {});
  EXPECT_TRUE(forced.packed());
}

}  // namespace
