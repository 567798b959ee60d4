// The optimizer tile kernels, each compiled once per SIMD level from one element-wise body.
//
// Why one body and not intrinsics: the loops are memory bound (Adam moves 28 bytes per element), so
// what matters is that they vectorize at full width and fuse into one pass, which the compiler does
// from a plain loop under `#pragma omp simd` once sqrt does not set errno (this file gets
// -fno-math-errno). Each variant is the same always-inline body instantiated inside a function
// carrying a `target` attribute, so GCC vectorizes it for that ISA. The file is compiled with
// -ffp-contract=off: no variant fuses a multiply and an add, so all of them perform the same
// correctly rounded IEEE operations per element and agree bit for bit (vector sqrt and division are
// exact-rounded like their scalar forms).
#include "ops/optimizer_kernels.h"

#include <cmath>

namespace deepspeed::ops::detail {
namespace {

#define DS_ALWAYS_INLINE inline __attribute__((always_inline))

template <bool kFirst>
DS_ALWAYS_INLINE void adam_body(float* __restrict p, const float* __restrict g, float* __restrict m,
                                float* __restrict v, int64_t n, const AdamScalars& s) {
  const float b1 = s.beta1, omb1 = s.one_minus_beta1, b2 = s.beta2, omb2 = s.one_minus_beta2;
  const float eps = s.eps, step_size = s.step_size, inv_sqrt_bc2 = s.inv_sqrt_bc2;
  const float l2 = s.l2, decay = s.decay;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float gi = g[i] + l2 * pi;
    const float mi = (kFirst ? 0.0f : m[i] * b1) + omb1 * gi;
    const float vi = (kFirst ? 0.0f : v[i] * b2) + omb2 * gi * gi;
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    p[i] = pi * decay - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

DS_ALWAYS_INLINE void sgd_body(float* __restrict p, const float* __restrict g, int64_t n,
                               const SgdScalars& s) {
  const float lr = s.lr, wd = s.weight_decay;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    p[i] = pi - lr * (g[i] + wd * pi);
  }
}

template <bool kFirst, bool kNesterov>
DS_ALWAYS_INLINE void sgd_momentum_body(float* __restrict p, const float* __restrict g,
                                        float* __restrict buf, int64_t n, const SgdScalars& s) {
  const float lr = s.lr, wd = s.weight_decay, mu = s.momentum, omd = s.one_minus_dampening;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float d = g[i] + wd * pi;
    const float b = kFirst ? d : buf[i] * mu + omd * d;
    const float u = kNesterov ? d + mu * b : b;
    p[i] = pi - lr * u;
    buf[i] = b;
  }
}

template <bool kFirst>
DS_ALWAYS_INLINE void adagrad_body(float* __restrict p, const float* __restrict g,
                                   float* __restrict sum, int64_t n, const AdagradScalars& s) {
  const float clr = s.clr, wd = s.weight_decay, eps = s.eps, init = s.initial_accumulator_value;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float gi = g[i] + wd * pi;
    const float si = (kFirst ? init : sum[i]) + gi * gi;
    p[i] = pi - clr * (gi / (std::sqrt(si) + eps));
    sum[i] = si;
  }
}

template <bool kFirst>
DS_ALWAYS_INLINE void lion_body(float* __restrict p, const float* __restrict g, float* __restrict m,
                                int64_t n, const LionScalars& s) {
  const float lr = s.lr, decay = s.decay;
  const float b1 = s.beta1, omb1 = s.one_minus_beta1, b2 = s.beta2, omb2 = s.one_minus_beta2;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = kFirst ? 0.0f : m[i];
    const float c = mi * b1 + omb1 * gi;
    // Branch-free so the loop vectorizes without masking (AVX2 has none).
    const float sign = static_cast<float>(c > 0.0f) - static_cast<float>(c < 0.0f);
    p[i] = p[i] * decay - lr * sign;
    m[i] = mi * b2 + omb2 * gi;
  }
}

// The entry points of one variant: the loop-invariant flags become template arguments here so the
// vectorized loops carry no per-element branches.
#define DS_DEFINE_VARIANT(suffix, attr)                                                          \
  attr void adam_##suffix(float* p, const float* g, float* m, float* v, int64_t n,               \
                          const AdamScalars& s) {                                                \
    if (s.first) {                                                                               \
      adam_body<true>(p, g, m, v, n, s);                                                         \
    } else {                                                                                     \
      adam_body<false>(p, g, m, v, n, s);                                                        \
    }                                                                                            \
  }                                                                                              \
  attr void sgd_##suffix(float* p, const float* g, float* /*buf*/, int64_t n,                    \
                         const SgdScalars& s) {                                                  \
    sgd_body(p, g, n, s);                                                                        \
  }                                                                                              \
  attr void sgd_momentum_##suffix(float* p, const float* g, float* buf, int64_t n,               \
                                  const SgdScalars& s) {                                         \
    if (s.first) {                                                                               \
      if (s.nesterov) {                                                                          \
        sgd_momentum_body<true, true>(p, g, buf, n, s);                                          \
      } else {                                                                                   \
        sgd_momentum_body<true, false>(p, g, buf, n, s);                                         \
      }                                                                                          \
    } else if (s.nesterov) {                                                                     \
      sgd_momentum_body<false, true>(p, g, buf, n, s);                                           \
    } else {                                                                                     \
      sgd_momentum_body<false, false>(p, g, buf, n, s);                                          \
    }                                                                                            \
  }                                                                                              \
  attr void adagrad_##suffix(float* p, const float* g, float* sum, int64_t n,                    \
                             const AdagradScalars& s) {                                          \
    if (s.first) {                                                                               \
      adagrad_body<true>(p, g, sum, n, s);                                                       \
    } else {                                                                                     \
      adagrad_body<false>(p, g, sum, n, s);                                                      \
    }                                                                                            \
  }                                                                                              \
  attr void lion_##suffix(float* p, const float* g, float* m, int64_t n, const LionScalars& s) { \
    if (s.first) {                                                                               \
      lion_body<true>(p, g, m, n, s);                                                            \
    } else {                                                                                     \
      lion_body<false>(p, g, m, n, s);                                                           \
    }                                                                                            \
  }                                                                                              \
  const KernelTable kTable_##suffix = {adam_##suffix, sgd_##suffix, sgd_momentum_##suffix,       \
                                       adagrad_##suffix, lion_##suffix};

DS_DEFINE_VARIANT(scalar, )
#if defined(__x86_64__) || defined(__i386__)
#define DS_HAVE_X86_VARIANTS 1
DS_DEFINE_VARIANT(avx2, __attribute__((target("avx2"))))
DS_DEFINE_VARIANT(avx512, __attribute__((target("avx512f,prefer-vector-width=512"))))
#endif

const KernelTable kNoKernels = {};

}  // namespace

const KernelTable& kernel_table(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return kTable_scalar;
#ifdef DS_HAVE_X86_VARIANTS
    case SimdLevel::kAvx2:
      return kTable_avx2;
    case SimdLevel::kAvx512:
      return kTable_avx512;
#endif
    default:
      return kNoKernels;
  }
}

}  // namespace deepspeed::ops::detail
