// The fp32 -> bf16 / fp16 conversion kernels behind the optimizers' fused copy-back (DeepSpeed's
// `fp16_param`), one table per SIMD level.
//
// Both round to nearest, ties to even, and agree bit for bit with c10's BFloat16 / Half conversions
// (what `tensor.to(at::kBFloat16 / at::kHalf)` computes) on every non-NaN input, including
// subnormals, overflow to infinity and signed zeros. NaN stays NaN (quiet) but its payload is not
// specified: bf16 gives 0x7FC0 on every level, fp16 gives sign|0x7E00 on the scalar level and
// F16C's truncated payload on AVX2/AVX-512.
//
// Like the optimizer tiles they take raw pointers and know nothing of tensors or threads; `src` and
// `dst` must not overlap.
#pragma once

#include <cstdint>

#include "deepspeed/ops/simd.h"

namespace deepspeed::ops::detail {

using ConvertFn = void (*)(const float* src, uint16_t* dst, int64_t n);

struct ConvertTable {
  ConvertFn to_bf16 = nullptr;
  ConvertFn to_fp16 = nullptr;
};

// The converters compiled for `level` (concrete, not kAuto); nulls when this build has none.
const ConvertTable& convert_table(SimdLevel level);

}  // namespace deepspeed::ops::detail
