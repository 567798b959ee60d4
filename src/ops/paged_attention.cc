// paged_decode_attention (deepspeed/ops/paged_attention.h): one body, compiled per SIMD level as the optimizer
// kernels are (optimizer_kernels.cc explains the pattern). The dot products, the softmax (with an exp written as a
// vectorizable loop body) and the weighted sum of values are plain loops under `#pragma omp simd`; the query heads
// that share a key/value head sweep its keys together, so each key is read once.
#include "deepspeed/ops/paged_attention.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "deepspeed/error.h"
#include "deepspeed/ops/simd.h"

namespace deepspeed::ops {
namespace {

#define DS_PAGED_INLINE inline __attribute__((always_inline))

DS_PAGED_INLINE float to_float(float x) { return x; }
DS_PAGED_INLINE float to_float(uint16_t bf16) {  // bfloat16 is float's upper half
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

DS_PAGED_INLINE void store(float* out, float x) { *out = x; }
DS_PAGED_INLINE void store(uint16_t* out, float x) { *out = c10::BFloat16(x).x; }  // round to nearest even

struct Args {
  const void* q;
  const void* keys;
  const void* values;
  void* out;
  int64_t q_head_stride, q_row_stride, out_head_stride, out_row_stride;
  int64_t heads, kv_heads, dim, block_size;
  float scale;
  const PagedDecodeSequence* sequences;
  int64_t count;
};

// e^x for x <= 0 (a score minus the row's largest), as a loop body GCC vectorizes: Cody-Waite reduction to
// r in [-ln2/2, ln2/2], Cephes' degree-6 polynomial for e^r (about 1 ulp), 2^n put into the exponent bits.
DS_PAGED_INLINE float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);  // below it e^x is under float's smallest normal: the weight is 0 either way
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// q . k over dim elements in 16 float lanes, summed as a tree at the end: a reduction clause's epilogue added the
// lanes one after another (16 dependent adds per key, most of the kernel's time).
template <typename T>
DS_PAGED_INLINE float dot(const float* __restrict q, const T* __restrict k, int64_t dim) {
  constexpr int kLanes = 16;
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= dim; i += kLanes)
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) part[j] += q[i + j] * to_float(k[i + j]);
  float tail = 0.0f;
  for (; i < dim; ++i) tail += q[i] * to_float(k[i]);
  for (int width = kLanes / 2; width >= 1; width /= 2)
#pragma omp simd
    for (int j = 0; j < width; ++j) part[j] += part[j + width];
  return part[0] + tail;
}

constexpr int64_t kMaxHeadDim = 512;
constexpr int64_t kMaxGroup = 16;  // query heads per key/value head handled in one sweep over the keys

// Calls f(position, slot) for the sequence's positions 0..length-1 in order, a block at a time (no division per
// position).
template <typename F>
DS_PAGED_INLINE void for_each_slot(const PagedDecodeSequence& s, int64_t block_size, F f) {
  for (int64_t start = 0, b = 0; start < s.length; start += block_size, ++b) {
    const int64_t base = s.blocks[b] * block_size, n = std::min(block_size, s.length - start);
    for (int64_t j = 0; j < n; ++j) f(start + j, base + j);
  }
}

// acc = sum over the sequence's positions p of weights[p] * value(p), for one query head. kDim: the head size when
// known at compile time (the common 64 and 128), so the accumulator stays in registers across the positions; 0:
// `dim` at run time.
template <typename T, int64_t kDim>
DS_PAGED_INLINE void weighted_values(const PagedDecodeSequence& s, int64_t block_size, const T* values,
                                     int64_t row_stride, const float* __restrict weights, float* __restrict acc,
                                     int64_t dim = kDim) {
  const int64_t d = kDim > 0 ? kDim : dim;
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) acc[i] = 0.0f;
  for_each_slot(s, block_size, [&](int64_t p, int64_t slot) {
    const T* __restrict v = values + slot * row_stride;
    const float w = weights[p];
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) acc[i] += w * to_float(v[i]);
  });
}

// Query heads [h0, h0 + group) of one sequence, which share key/value head g: one sweep over the keys for all of
// their scores, the softmax per head, then each head's weighted sum of the values.
template <typename T>
DS_PAGED_INLINE void decode_heads(const Args& a, const PagedDecodeSequence& s, int64_t g, int64_t h0, int64_t group,
                                  float* __restrict scores) {
  const int64_t dim = a.dim, length = s.length, row_stride = a.kv_heads * dim;
  const T* keys = static_cast<const T*>(a.keys) + g * dim;
  const T* values = static_cast<const T*>(a.values) + g * dim;
  float q[kMaxGroup][kMaxHeadDim];
  for (int64_t h = 0; h < group; ++h) {
    const T* src = static_cast<const T*>(a.q) + (h0 + h) * a.q_head_stride + s.row * a.q_row_stride;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) q[h][i] = to_float(src[i]) * a.scale;
  }
  for_each_slot(s, a.block_size, [&](int64_t p, int64_t slot) {
    const T* __restrict k = keys + slot * row_stride;
    for (int64_t h = 0; h < group; ++h) scores[h * length + p] = dot(q[h], k, dim);
  });
  float norm[kMaxGroup];
  for (int64_t h = 0; h < group; ++h) {
    float* __restrict sc = scores + h * length;
    float best = -INFINITY, total = 0.0f;
#pragma omp simd reduction(max : best)
    for (int64_t p = 0; p < length; ++p) best = std::max(best, sc[p]);
#pragma omp simd reduction(+ : total)
    for (int64_t p = 0; p < length; ++p) {
      sc[p] = exp_nonpositive(sc[p] - best);
      total += sc[p];
    }
    norm[h] = 1.0f / total;
  }
  float acc[kMaxHeadDim];
  for (int64_t h = 0; h < group; ++h) {
    if (dim == 64) {
      weighted_values<T, 64>(s, a.block_size, values, row_stride, scores + h * length, acc);
    } else if (dim == 128) {
      weighted_values<T, 128>(s, a.block_size, values, row_stride, scores + h * length, acc);
    } else {
      weighted_values<T, 0>(s, a.block_size, values, row_stride, scores + h * length, acc, dim);
    }
    T* o = static_cast<T*>(a.out) + (h0 + h) * a.out_head_stride + s.row * a.out_row_stride;
    for (int64_t i = 0; i < dim; ++i) store(o + i, acc[i] * norm[h]);
  }
}

// One (sequence, key/value head) task: the query heads that share that key/value head, kMaxGroup at a time.
template <typename T>
DS_PAGED_INLINE void decode_task(const Args& a, int64_t task, std::vector<float>& scores) {
  const PagedDecodeSequence& s = a.sequences[task / a.kv_heads];
  const int64_t g = task % a.kv_heads, per_kv = a.heads / a.kv_heads;
  for (int64_t first = 0; first < per_kv; first += kMaxGroup) {
    const int64_t group = std::min(kMaxGroup, per_kv - first);
    scores.resize(static_cast<size_t>(group * s.length));
    decode_heads<T>(a, s, g, g * per_kv + first, group, scores.data());
  }
}

using TaskFn = void (*)(const Args&, int64_t, int64_t);

#define DS_PAGED_VARIANT(suffix, attr)                                         \
  attr void decode_float_##suffix(const Args& a, int64_t begin, int64_t end) { \
    std::vector<float> scores;                                                 \
    for (int64_t t = begin; t < end; ++t) decode_task<float>(a, t, scores);    \
  }                                                                            \
  attr void decode_bf16_##suffix(const Args& a, int64_t begin, int64_t end) {  \
    std::vector<float> scores;                                                 \
    for (int64_t t = begin; t < end; ++t) decode_task<uint16_t>(a, t, scores); \
  }

DS_PAGED_VARIANT(scalar, )
#if defined(__x86_64__) || defined(__i386__)
#define DS_PAGED_X86_VARIANTS 1
DS_PAGED_VARIANT(avx2, __attribute__((target("avx2,fma"))))
DS_PAGED_VARIANT(avx512, __attribute__((target("avx512f,fma,prefer-vector-width=512"))))
#endif

TaskFn task_fn(bool bf16) {
  switch (resolve_simd_level()) {
#ifdef DS_PAGED_X86_VARIANTS
    case SimdLevel::kAvx512:
      return bf16 ? decode_bf16_avx512 : decode_float_avx512;
    case SimdLevel::kAvx2:
      return bf16 ? decode_bf16_avx2 : decode_float_avx2;
#endif
    default:
      return bf16 ? decode_bf16_scalar : decode_float_scalar;
  }
}

}  // namespace

bool paged_decode_attention_supports(const at::Tensor& keys) {
  return keys.device().is_cpu() && (keys.scalar_type() == at::kFloat || keys.scalar_type() == at::kBFloat16) &&
         keys.dim() == 4 && keys.size(3) <= kMaxHeadDim;
}

void paged_decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const std::vector<PagedDecodeSequence>& sequences, double scale, at::Tensor& out) {
  DS_CHECK(paged_decode_attention_supports(keys) && q.scalar_type() == keys.scalar_type() &&
               values.scalar_type() == keys.scalar_type() && out.scalar_type() == keys.scalar_type() &&
               q.device().is_cpu() && out.device().is_cpu(),
           "paged_decode_attention: needs float or bfloat16 CPU tensors of one dtype");
  DS_CHECK(q.dim() == 3 && out.sizes() == q.sizes() && keys.dim() == 4 && values.sizes() == keys.sizes() &&
               keys.is_contiguous() && values.is_contiguous() && q.stride(2) == 1 && out.stride(2) == 1 &&
               keys.size(3) == q.size(2) && keys.size(3) <= kMaxHeadDim && keys.size(2) >= 1 &&
               q.size(0) % keys.size(2) == 0,
           "paged_decode_attention: q and out [heads, T, dim], keys and values [blocks, block_size, kv_heads, dim] "
           "with heads a multiple of kv_heads and dim at most ",
           kMaxHeadDim, "; got q ", q.sizes(), ", keys ", keys.sizes());
  for (const PagedDecodeSequence& s : sequences)
    DS_CHECK(s.length >= 1 && s.row >= 0 && s.row < q.size(1) && s.blocks != nullptr,
             "paged_decode_attention: a sequence needs length >= 1 and a row among the ", q.size(1), " queries");
  if (sequences.empty()) return;
  const Args a{q.data_ptr(),
               keys.data_ptr(),
               values.data_ptr(),
               out.data_ptr(),
               q.stride(0),
               q.stride(1),
               out.stride(0),
               out.stride(1),
               q.size(0),
               keys.size(2),
               q.size(2),
               keys.size(1),
               static_cast<float>(scale),
               sequences.data(),
               static_cast<int64_t>(sequences.size())};
  const TaskFn fn = task_fn(keys.scalar_type() == at::kBFloat16);
  at::parallel_for(0, a.count * a.kv_heads, 1, [&](int64_t begin, int64_t end) { fn(a, begin, end); });
}

}  // namespace deepspeed::ops
