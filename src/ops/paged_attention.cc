// paged_decode_attention (deepspeed/ops/paged_attention.h): one body, compiled per SIMD level as the optimizer
// kernels are (optimizer_kernels.cc explains the pattern). The dot products and the weighted sum of values are plain
// loops under `#pragma omp simd`; the softmax is two passes over a per-task row of scores.
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

// One (sequence, key/value head) task: the query heads that share that key/value head, over the sequence's keys.
template <typename T>
DS_PAGED_INLINE void decode_task(const Args& a, int64_t task, std::vector<float>& scores, std::vector<float>& acc) {
  const PagedDecodeSequence& s = a.sequences[task / a.kv_heads];
  const int64_t g = task % a.kv_heads, group = a.heads / a.kv_heads, dim = a.dim;
  const T* keys = static_cast<const T*>(a.keys);
  const T* values = static_cast<const T*>(a.values);
  scores.resize(static_cast<size_t>(s.length));
  acc.resize(static_cast<size_t>(dim));
  float* sc = scores.data();
  float* ac = acc.data();
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const T* q = static_cast<const T*>(a.q) + h * a.q_head_stride + s.row * a.q_row_stride;
    float best = -INFINITY;
    for (int64_t p = 0; p < s.length; ++p) {
      const int64_t slot = s.blocks[p / a.block_size] * a.block_size + p % a.block_size;
      const T* k = keys + (slot * a.kv_heads + g) * dim;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < dim; ++i) dot += to_float(q[i]) * to_float(k[i]);
      sc[p] = dot * a.scale;
      best = std::max(best, sc[p]);
    }
    float total = 0.0f;
    for (int64_t p = 0; p < s.length; ++p) {
      sc[p] = std::exp(sc[p] - best);
      total += sc[p];
    }
    const float norm = 1.0f / total;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) ac[i] = 0.0f;
    for (int64_t p = 0; p < s.length; ++p) {
      const int64_t slot = s.blocks[p / a.block_size] * a.block_size + p % a.block_size;
      const T* v = values + (slot * a.kv_heads + g) * dim;
      const float w = sc[p] * norm;
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) ac[i] += w * to_float(v[i]);
    }
    T* o = static_cast<T*>(a.out) + h * a.out_head_stride + s.row * a.out_row_stride;
    for (int64_t i = 0; i < dim; ++i) store(o + i, ac[i]);
  }
}

using TaskFn = void (*)(const Args&, int64_t, int64_t);

#define DS_PAGED_VARIANT(suffix, attr)                                              \
  attr void decode_float_##suffix(const Args& a, int64_t begin, int64_t end) {      \
    std::vector<float> scores, acc;                                                 \
    for (int64_t t = begin; t < end; ++t) decode_task<float>(a, t, scores, acc);    \
  }                                                                                 \
  attr void decode_bf16_##suffix(const Args& a, int64_t begin, int64_t end) {       \
    std::vector<float> scores, acc;                                                 \
    for (int64_t t = begin; t < end; ++t) decode_task<uint16_t>(a, t, scores, acc); \
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
  return keys.device().is_cpu() && (keys.scalar_type() == at::kFloat || keys.scalar_type() == at::kBFloat16);
}

void paged_decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                            const std::vector<PagedDecodeSequence>& sequences, double scale, at::Tensor& out) {
  DS_CHECK(paged_decode_attention_supports(keys) && q.scalar_type() == keys.scalar_type() &&
               values.scalar_type() == keys.scalar_type() && out.scalar_type() == keys.scalar_type() &&
               q.device().is_cpu() && out.device().is_cpu(),
           "paged_decode_attention: needs float or bfloat16 CPU tensors of one dtype");
  DS_CHECK(q.dim() == 3 && out.sizes() == q.sizes() && keys.dim() == 4 && values.sizes() == keys.sizes() &&
               keys.is_contiguous() && values.is_contiguous() && q.stride(2) == 1 && out.stride(2) == 1 &&
               keys.size(3) == q.size(2) && keys.size(2) >= 1 && q.size(0) % keys.size(2) == 0,
           "paged_decode_attention: q and out [heads, T, dim], keys and values [blocks, block_size, kv_heads, dim] "
           "with heads a multiple of kv_heads; got q ",
           q.sizes(), ", keys ", keys.sizes());
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
