// fp32 -> bf16 / fp16 with round-to-nearest-even, per SIMD level (see convert_kernels.h).
//
// bf16 is a plain integer loop (add the rounding bias, keep the top half) that the compiler
// vectorizes for each level's ISA. fp16 uses the hardware converter where the level has one (F16C's
// vcvtps2ph, AVX-512F's 512-bit form, both with round-to-nearest-even as an immediate, so MXCSR
// does not matter) and a branch-free bit-level conversion otherwise, which also vectorizes.
#include "ops/convert_kernels.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace deepspeed::ops::detail {
namespace {

#define DS_ALWAYS_INLINE inline __attribute__((always_inline))

DS_ALWAYS_INLINE uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

DS_ALWAYS_INLINE float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Rounds away the low 16 bits: the bias is 0x7FFF plus the lowest kept bit, so an exact tie rounds
// to the even neighbour; a carry out of the mantissa correctly bumps the exponent (up to infinity).
DS_ALWAYS_INLINE uint16_t bf16_of(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
}

// IEEE binary16 from binary32, round to nearest even, without branches (so the loop vectorizes):
// every case is computed and the right one selected.
DS_ALWAYS_INLINE uint16_t fp16_of(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Normal result: re-bias the exponent (127 -> 15) and round away 13 mantissa bits as bf16_of
  // does; a mantissa carry moves to the next binade.
  const uint32_t normal = (a - 0x38000000u + 0xFFFu + ((a >> 13) & 1u)) >> 13;
  // |f| < 2^-14 (half's smallest normal): adding 0.5f, whose ulp is 2^-24 (half's smallest
  // subnormal), lets the FPU round |f| to a multiple of 2^-24 with ties to even; the low bits are
  // then the subnormal encoding (0x400 when it rounds up to the smallest normal, also correct).
  const uint32_t subnormal = bits_of(float_of(a) + 0.5f) - 0x3F000000u;
  uint32_t h = a < 0x38800000u ? subnormal : normal;
  // 65520 = halfway between 65504 (largest half, odd mantissa) and 65536: ties to even -> infinity.
  h = a >= 0x477FF000u ? 0x7C00u : h;
  h = a > 0x7F800000u ? 0x7E00u : h;
  return static_cast<uint16_t>(sign | h);
}

DS_ALWAYS_INLINE void to_bf16_body(const float* __restrict src, uint16_t* __restrict dst,
                                   int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_of(src[i]);
}

DS_ALWAYS_INLINE void to_fp16_body(const float* __restrict src, uint16_t* __restrict dst,
                                   int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_of(src[i]);
}

void to_bf16_scalar(const float* src, uint16_t* dst, int64_t n) { to_bf16_body(src, dst, n); }
void to_fp16_scalar(const float* src, uint16_t* dst, int64_t n) { to_fp16_body(src, dst, n); }
const ConvertTable kTable_scalar = {to_bf16_scalar, to_fp16_scalar};

#if defined(__x86_64__) || defined(__i386__)
#define DS_HAVE_X86_CONVERTERS 1

#define DS_AVX2 __attribute__((target("avx2,f16c")))
DS_AVX2 void to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) { to_bf16_body(src, dst, n); }
DS_AVX2 void to_fp16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  if (i < n) {
    // The tail through the same instruction, so every element of a level rounds the same way.
    float in[8] = {};
    uint16_t out[8];
    std::memcpy(in, src + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}
const ConvertTable kTable_avx2 = {to_bf16_avx2, to_fp16_avx2};

#define DS_AVX512 __attribute__((target("avx512f,prefer-vector-width=512")))
DS_AVX512 void to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  to_bf16_body(src, dst, n);
}
// The zero-masking form with a full mask: the plain _mm512_cvtps_ph starts from an "undefined"
// register that GCC 12 warns about (-Wmaybe-uninitialized); the instruction is the same.
DS_AVX512 __m256i fp16_of_512(__m512 x) {
  return _mm512_maskz_cvtps_ph(static_cast<__mmask16>(0xFFFF), x, _MM_FROUND_TO_NEAREST_INT);
}
DS_AVX512 void to_fp16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = fp16_of_512(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    // A masked load and store: the tail never touches memory past n.
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256i h = fp16_of_512(_mm512_maskz_loadu_ps(mask, src + i));
    alignas(32) uint16_t out[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), h);
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(uint16_t));
  }
}
const ConvertTable kTable_avx512 = {to_bf16_avx512, to_fp16_avx512};
#endif

const ConvertTable kNoConverters = {};

}  // namespace

const ConvertTable& convert_table(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return kTable_scalar;
#ifdef DS_HAVE_X86_CONVERTERS
    case SimdLevel::kAvx2:
      return kTable_avx2;
    case SimdLevel::kAvx512:
      return kTable_avx512;
#endif
    default:
      return kNoConverters;
  }
}

}  // namespace deepspeed::ops::detail
