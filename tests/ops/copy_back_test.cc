// The fused copy-back (param_copy) of the optimizer kernels and convert_fp32_to: bit for bit what
// `tensor.to(bf16 / fp16)` gives, on every SIMD level, for awkward lengths (every vector tail, tile
// and chunk boundaries) and for the values where rounding is hard (ties, subnormals, overflow).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "deepspeed/error.h"
#include "deepspeed/ops/cpu_optimizer.h"
#include "test_util.h"

namespace deepspeed::ops {
namespace {

using Param = std::tuple<SimdLevel, at::ScalarType>;

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Values whose rounding is easy to get wrong, for both formats, with both signs.
std::vector<float> edge_values() {
  std::vector<float> v = {
      0.0f,
      1.0f,
      65504.0f,  // half's largest finite
      65519.99f,
      65520.0f,
      65536.0f,
      1e6f,  // around half's overflow to infinity
      std::numeric_limits<float>::max(),
      std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::min(),              // fp32 smallest normal
      std::numeric_limits<float>::denorm_min(),       // fp32 smallest subnormal
      std::ldexp(1.0f, -14),                          // half's smallest normal
      std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25),  // rounds up to it (tie, even)
      std::ldexp(1.0f, -24),                          // half's smallest subnormal
      std::ldexp(1.0f, -25),                          // tie between 0 and it: rounds to 0
      std::ldexp(3.0f, -25),                          // tie between 1 and 2 subnormal ulps: 2
      std::ldexp(5.0f, -25),                          // tie between 2 and 3: 2
      std::ldexp(1.0f, -26),
      1.0f + std::ldexp(1.0f, -11),  // half tie, even below
      1.0f + std::ldexp(3.0f, -11),  // half tie, even above
      float_of(0x3F808000u),
      float_of(0x3F818000u),  // bf16 ties, even below / above
      float_of(0x3F80FFFFu),
      float_of(0x7F7F8000u),  // bf16 near-tie; tie to infinity
  };
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

// `count` random non-NaN floats over the whole range of bit patterns.
at::Tensor random_floats(int64_t count) {
  at::Tensor bits = at::randint(0, int64_t{1} << 32, {count}, at::kLong);
  at::Tensor u = bits.to(at::kInt);  // wraps to the same 32 bits
  at::Tensor f = u.view(at::kFloat);
  return at::where(at::isnan(f), at::zeros_like(f), f).contiguous();
}

// Bitwise equality of two 16-bit tensors.
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return at::equal(a.view(at::kShort), b.view(at::kShort));
}

class CopyBackTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { at::manual_seed(7); }
  SimdLevel level() const { return std::get<0>(GetParam()); }
  at::ScalarType dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(CopyBackTest, ConvertMatchesTorchOnEdgeValues) {
  std::vector<float> values = edge_values();
  const at::Tensor src = at::tensor(values, at::kFloat);
  at::Tensor dst = at::empty({src.numel()}, dtype());
  convert_fp32_to(dst, src, level());
  const at::Tensor ref = src.to(dtype());
  for (int64_t i = 0; i < src.numel(); ++i) {
    const auto got = static_cast<uint16_t>(dst.view(at::kShort)[i].item<int16_t>());
    const auto want = static_cast<uint16_t>(ref.view(at::kShort)[i].item<int16_t>());
    EXPECT_EQ(got, want) << "value " << values[static_cast<size_t>(i)] << " (index " << i << ")";
  }
}

TEST_P(CopyBackTest, ConvertMatchesTorchOnRandomBitsAndEveryTail) {
  // 1..40 covers every tail of 8- and 16-wide vectors; the others cross tiles and chunks.
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 40; ++n) sizes.push_back(n);
  for (int64_t n : testing::sizes_for(level(), kTileElements)) sizes.push_back(n);
  for (int64_t n : sizes) {
    SCOPED_TRACE("numel=" + std::to_string(n));
    const at::Tensor src = random_floats(n);
    at::Tensor dst = at::full({n}, 0x5555, at::kShort).view(dtype());  // not what any value gives
    convert_fp32_to(dst, src, level());
    EXPECT_TRUE(same_bits(dst, src.to(dtype())));
  }
}

TEST_P(CopyBackTest, ConvertWritesNothingPastTheEnd) {
  const at::Tensor src = at::randn({37});
  at::Tensor buffer = at::full({40}, 0x1234, at::kShort);
  convert_fp32_to(buffer.narrow(0, 0, 37).view(dtype()), src, level());
  EXPECT_TRUE(at::equal(buffer.narrow(0, 37, 3), at::full({3}, 0x1234, at::kShort)));
}

TEST_P(CopyBackTest, NanStaysNan) {
  const at::Tensor src = at::tensor({NAN, -NAN, 1.0f}, at::kFloat);
  at::Tensor dst = at::empty({3}, dtype());
  convert_fp32_to(dst, src, level());
  const at::Tensor back = dst.to(at::kFloat);
  EXPECT_TRUE(std::isnan(back[0].item<float>()));
  EXPECT_TRUE(std::isnan(back[1].item<float>()));
  EXPECT_EQ(back[2].item<float>(), 1.0f);
}

// Steps an optimizer over `tensors` = {param, state...}, with or without a param_copy.
using CopyBackStepFn = std::function<void(std::vector<at::Tensor>& t, const at::Tensor& grad, int64_t step,
                                  SimdLevel level, const at::Tensor& copy)>;

struct CopyBackStep {
  const char* name;
  int state_tensors;
  CopyBackStepFn fn;
};

std::vector<CopyBackStep> optimizers() {
  return {
      {"adam", 2,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t s, SimdLevel l,
          const at::Tensor& c) {
         AdamParams hp;
         hp.weight_decay = 0.01;
         adam_step(t[0], g, t[1], t[2], hp, s, l, c);
       }},
      {"sgd_momentum", 1,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t s, SimdLevel l,
          const at::Tensor& c) {
         SgdParams hp;
         hp.lr = 0.1;
         hp.momentum = 0.9;
         sgd_step(t[0], g, t[1], hp, s, l, c);
       }},
      {"sgd", 0,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t s, SimdLevel l,
          const at::Tensor& c) {
         SgdParams hp;
         hp.lr = 0.1;
         sgd_step(t[0], g, at::Tensor(), hp, s, l, c);
       }},
      {"adagrad", 1,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t s, SimdLevel l,
          const at::Tensor& c) {
         AdagradParams hp;
         adagrad_step(t[0], g, t[1], hp, s, l, c);
       }},
      {"lion", 1,
       [](std::vector<at::Tensor>& t, const at::Tensor& g, int64_t s, SimdLevel l,
          const at::Tensor& c) {
         LionParams hp;
         hp.weight_decay = 0.1;
         lion_step(t[0], g, t[1], hp, s, l, c);
       }},
  };
}

// After every step the copy holds exactly param.to(dtype), and fusing the copy changes nothing in
// the fp32 update itself.
TEST_P(CopyBackTest, EveryOptimizerCopiesTheUpdatedParamBitForBit) {
  for (const CopyBackStep& opt : optimizers()) {
    for (int64_t n : testing::sizes_for(level(), kTileElements)) {
      SCOPED_TRACE(std::string(opt.name) + " numel=" + std::to_string(n));
      std::vector<at::Tensor> fused{at::randn({n}) * 4};
      for (int i = 0; i < opt.state_tensors; ++i) fused.push_back(at::empty({n}));
      std::vector<at::Tensor> plain;
      for (const auto& t : fused) plain.push_back(t.clone());
      at::Tensor copy = at::empty({n}, dtype());
      for (int64_t step = 1; step <= 3; ++step) {
        const at::Tensor grad = at::randn({n});
        opt.fn(fused, grad, step, level(), copy);
        opt.fn(plain, grad, step, level(), at::Tensor());
        ASSERT_TRUE(same_bits(copy, fused[0].to(dtype()))) << "step " << step;
      }
      for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(at::equal(fused[i], plain[i]));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSimdLevels, CopyBackTest,
                         ::testing::Combine(::testing::ValuesIn(supported_simd_levels()),
                                            ::testing::Values(at::kBFloat16, at::kHalf)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(simd_level_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == at::kBFloat16 ? "_bf16" : "_fp16");
                         });

TEST(CopyBackErrorsTest, BadCopyTensorsThrowNamingTheArgument) {
  at::Tensor p = at::zeros({8}), g = at::zeros({8}), m = at::zeros({8}), v = at::zeros({8});
  const auto throws_naming = [&](const at::Tensor& copy, const std::string& what) {
    try {
      adam_step(p, g, m, v, AdamParams{}, 1, SimdLevel::kAuto, copy);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("param_copy"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  throws_naming(at::zeros({8}), "Float");                      // fp32 is no copy target
  throws_naming(at::zeros({7}, at::kBFloat16), "7 elements");  // wrong length
  throws_naming(at::zeros({16}, at::kHalf).slice(0, 0, 16, 2), "contiguous=false");
  throws_naming(p.view(at::kBFloat16).narrow(0, 0, 8), "overlap");  // aliases the param itself
  at::Tensor src = at::zeros({4});
  EXPECT_THROW(convert_fp32_to(at::zeros({4}, at::kInt), src), Error);
  EXPECT_THROW(convert_fp32_to(at::zeros({4}, at::kHalf), at::zeros({4}, at::kDouble)), Error);
}

}  // namespace
}  // namespace deepspeed::ops
