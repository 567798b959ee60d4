// Validation, per-step constants and the OpenMP tile loop around the kernels of
// optimizer_kernels.cc.
#include "deepspeed/ops/cpu_optimizer.h"

#include <ATen/Parallel.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "deepspeed/error.h"
#include "ops/convert_kernels.h"
#include "ops/cuda_steps.h"
#include "ops/optimizer_kernels.h"
#include "ops/tensor_op_steps.h"

namespace deepspeed::ops {
namespace {

struct NamedTensor {
  const char* name;
  const at::Tensor* tensor;
};

// Every tensor a kernel touches: fp32, CPU, contiguous, as many elements as `param`, no overlap
// (the kernels are compiled as if their pointers were restrict).
void check_tensors(const char* op, std::initializer_list<NamedTensor> tensors) {
  const at::Tensor& param = *tensors.begin()->tensor;
  for (const NamedTensor& t : tensors) {
    DS_CHECK(t.tensor->defined(), op, ": ", t.name, " is an undefined tensor");
    const at::Tensor& x = *t.tensor;
    DS_CHECK(x.scalar_type() == at::kFloat && x.device() == param.device() && x.is_contiguous(), op, ": ",
             t.name, " must be a contiguous float32 tensor on param's device (", param.device(), "), got dtype=",
             x.scalar_type(), " device=", x.device(), " contiguous=", x.is_contiguous() ? "true" : "false");
    DS_CHECK(x.numel() == param.numel(), op, ": ", t.name, " has ", x.numel(),
             " elements but param has ", param.numel());
  }
  const int64_t bytes = param.numel() * static_cast<int64_t>(sizeof(float));
  for (auto a = tensors.begin(); a != tensors.end() && bytes > 0; ++a) {
    for (auto b = a + 1; b != tensors.end(); ++b) {
      const auto* pa = static_cast<const char*>(a->tensor->data_ptr());
      const auto* pb = static_cast<const char*>(b->tensor->data_ptr());
      DS_CHECK(pa + bytes <= pb || pb + bytes <= pa, op, ": ", a->name, " and ", b->name,
               " overlap in memory; each must be its own buffer");
    }
  }
}

void check_step(const char* op, int64_t step) {
  DS_CHECK(step >= 1, op, ": step must be >= 1 (steps count from 1 as in DeepSpeed), got ", step);
}

void check_range(const char* op, const char* name, double value, double lo, bool lo_open, double hi,
                 bool hi_open) {
  const bool ok = (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi) &&
                  std::isfinite(value);
  DS_CHECK(ok, op, ": ", name, " must be in ", lo_open ? "(" : "[", lo, ", ", hi,
           hi_open ? ")" : "]", ", got ", value);
}

constexpr double kInf = INFINITY;

void check_nonnegative(const char* op, const char* name, double value) {
  check_range(op, name, value, 0.0, false, kInf, true);
}

void check_beta(const char* op, const char* name, double value) {
  check_range(op, name, value, 0.0, false, 1.0, true);
}

void check_positive(const char* op, const char* name, double value) {
  check_range(op, name, value, 0.0, true, kInf, true);
}

// Runs `tile(begin, length)` over [0, n) in kTileElements pieces on at::get_num_threads() OpenMP
// threads. Tiles are fixed by n alone, never by the thread count, so the result does not depend on
// it.
template <typename Tile>
void for_each_tile(int64_t n, const Tile& tile) {
  const int64_t tiles = (n + kTileElements - 1) / kTileElements;
  const int threads = static_cast<int>(std::min<int64_t>(at::get_num_threads(), tiles));
  if (threads <= 1 || at::in_parallel_region()) {
    if (n > 0) tile(0, n);
    return;
  }
  // Dynamic: on a shared box one thread is often descheduled, and the others should take its tiles.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t begin = t * kTileElements;
    tile(begin, std::min(kTileElements, n - begin));
  }
}

float* ptr(at::Tensor& t) { return t.data_ptr<float>(); }
const float* ptr(const at::Tensor& t) { return t.data_ptr<float>(); }

// Elements updated before the copy-back converts them: small enough that the updated params are
// still in L1 when the converter reads them, large enough that the two calls per chunk cost
// nothing.
constexpr int64_t kCopyChunkElements = 2048;

// Where a step writes its bf16/fp16 copy of the updated params, and with which converter; `fn` is
// null when the caller passed no param_copy.
struct CopyBack {
  detail::ConvertFn fn = nullptr;
  uint16_t* out = nullptr;
};

// Checks a half-precision tensor paired with fp32 `src` (named `src_name`) and picks its converter.
CopyBack make_copy_back(const char* op, const char* name, const at::Tensor& copy,
                        const char* src_name, const at::Tensor& src, SimdLevel level) {
  const bool bf16 = copy.scalar_type() == at::kBFloat16;
  DS_CHECK(
      (bf16 || copy.scalar_type() == at::kHalf) && copy.device().is_cpu() && copy.is_contiguous(),
      op, ": ", name,
      " must be a contiguous bfloat16 or float16 CPU tensor, got dtype=", copy.scalar_type(),
      " device=", copy.device(), " contiguous=", copy.is_contiguous() ? "true" : "false");
  DS_CHECK(copy.numel() == src.numel(), op, ": ", name, " has ", copy.numel(), " elements but ",
           src_name, " has ", src.numel());
  const auto* c = static_cast<const char*>(copy.data_ptr());
  const auto* p = static_cast<const char*>(src.data_ptr());
  const int64_t n = src.numel();
  DS_CHECK(n == 0 || c + 2 * n <= p || p + 4 * n <= c, op, ": ", name, " and ", src_name,
           " overlap in memory; each must be its own buffer");
  const detail::ConvertTable& table = detail::convert_table(level);
  return {bf16 ? table.to_bf16 : table.to_fp16, static_cast<uint16_t*>(copy.data_ptr())};
}

CopyBack copy_back_for(const char* op, const at::Tensor& param, const at::Tensor& param_copy,
                       SimdLevel level) {
  if (!param_copy.defined()) return {};
  return make_copy_back(op, "param_copy", param_copy, "param", param, level);
}

// One tile of a step: `update(begin, length)` runs the kernel; with a copy-back it runs chunk by
// chunk, each chunk converted right after its update.
template <typename Update>
void run_tile(const CopyBack& copy, const float* p, int64_t begin, int64_t len,
              const Update& update) {
  if (copy.fn == nullptr) {
    update(begin, len);
    return;
  }
  for (int64_t c = begin; c < begin + len; c += kCopyChunkElements) {
    const int64_t n = std::min(kCopyChunkElements, begin + len - c);
    update(c, n);
    copy.fn(p + c, copy.out + c, n);
  }
}

}  // namespace

namespace detail {

AdamScalars adam_scalars(const AdamParams& params, int64_t step) {
  const double bc1 = params.bias_correction ? 1.0 - std::pow(params.beta1, step) : 1.0;
  const double bc2 = params.bias_correction ? 1.0 - std::pow(params.beta2, step) : 1.0;
  AdamScalars s;
  s.beta1 = static_cast<float>(params.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - params.beta1);
  s.beta2 = static_cast<float>(params.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - params.beta2);
  s.eps = static_cast<float>(params.eps);
  s.step_size = static_cast<float>(params.lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.l2 = params.adamw_mode ? 0.0f : static_cast<float>(params.weight_decay);
  s.decay = params.adamw_mode ? static_cast<float>(1.0 - params.lr * params.weight_decay) : 1.0f;
  s.first = step == 1;
  return s;
}

SgdScalars sgd_scalars(const SgdParams& params, int64_t step) {
  SgdScalars s;
  s.lr = static_cast<float>(params.lr);
  s.weight_decay = static_cast<float>(params.weight_decay);
  s.momentum = static_cast<float>(params.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - params.dampening);
  s.nesterov = params.nesterov;
  s.first = step == 1;
  return s;
}

AdagradScalars adagrad_scalars(const AdagradParams& params, int64_t step) {
  AdagradScalars s;
  s.clr = static_cast<float>(params.lr / (1.0 + static_cast<double>(step - 1) * params.lr_decay));
  s.weight_decay = static_cast<float>(params.weight_decay);
  s.eps = static_cast<float>(params.eps);
  s.initial_accumulator_value = static_cast<float>(params.initial_accumulator_value);
  s.first = step == 1;
  return s;
}

LionScalars lion_scalars(const LionParams& params, int64_t step) {
  LionScalars s;
  s.lr = static_cast<float>(params.lr);
  s.decay = static_cast<float>(1.0 - params.lr * params.weight_decay);
  s.beta1 = static_cast<float>(params.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - params.beta1);
  s.beta2 = static_cast<float>(params.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - params.beta2);
  s.first = step == 1;
  return s;
}

}  // namespace detail

void adam_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
               const AdamParams& params, int64_t step, SimdLevel simd,
               const at::Tensor& param_copy) {
  constexpr const char* kOp = "adam_step";
  DS_CHECK(!params.amsgrad, kOp,
           ": amsgrad=true is not supported by the fused CPU Adam (as in DeepSpeed's cpu_adam)");
  check_nonnegative(kOp, "lr", params.lr);
  check_beta(kOp, "beta1", params.beta1);
  check_beta(kOp, "beta2", params.beta2);
  check_positive(kOp, "eps", params.eps);
  check_nonnegative(kOp, "weight_decay", params.weight_decay);
  check_step(kOp, step);
  check_tensors(
      kOp,
      {{"param", &param}, {"grad", &grad}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}});
  const detail::AdamScalars s = detail::adam_scalars(params, step);
  if (param.is_cuda() && detail::fused_cuda_steps_enabled() &&
      (!param_copy.defined() || param_copy.is_contiguous())) {
    return detail::adam_fused_cuda(param, grad, exp_avg, exp_avg_sq, s, param_copy);
  }
  if (!param.device().is_cpu()) return detail::adam_tensor_ops(param, grad, exp_avg, exp_avg_sq, s, param_copy);
  const SimdLevel level = resolve_simd_level(simd);
  const auto kernel = detail::kernel_table(level).adam;
  const CopyBack copy = copy_back_for(kOp, param, param_copy, level);

  float* p = ptr(param);
  const float* g = ptr(grad);
  float* m = ptr(exp_avg);
  float* v = ptr(exp_avg_sq);
  for_each_tile(param.numel(), [&](int64_t begin, int64_t len) {
    run_tile(copy, p, begin, len,
             [&](int64_t b, int64_t n) { kernel(p + b, g + b, m + b, v + b, n, s); });
  });
}

void sgd_step(at::Tensor param, const at::Tensor& grad, at::Tensor momentum_buffer,
              const SgdParams& params, int64_t step, SimdLevel simd, const at::Tensor& param_copy) {
  constexpr const char* kOp = "sgd_step";
  check_nonnegative(kOp, "lr", params.lr);
  check_nonnegative(kOp, "momentum", params.momentum);
  check_range(kOp, "dampening", params.dampening, 0.0, false, 1.0, false);
  check_nonnegative(kOp, "weight_decay", params.weight_decay);
  DS_CHECK(!params.nesterov || (params.momentum > 0.0 && params.dampening == 0.0), kOp,
           ": nesterov requires momentum > 0 and dampening == 0, got momentum=", params.momentum,
           " dampening=", params.dampening);
  check_step(kOp, step);
  const bool use_momentum = params.momentum != 0.0;
  if (use_momentum) {
    check_tensors(kOp, {{"param", &param}, {"grad", &grad}, {"momentum_buffer", &momentum_buffer}});
  } else {
    check_tensors(kOp, {{"param", &param}, {"grad", &grad}});
  }
  const detail::SgdScalars s = detail::sgd_scalars(params, step);
  if (!param.device().is_cpu()) return detail::sgd_tensor_ops(param, grad, momentum_buffer, s, param_copy);
  const SimdLevel level = resolve_simd_level(simd);
  const detail::KernelTable& table = detail::kernel_table(level);
  const auto kernel = use_momentum ? table.sgd_momentum : table.sgd;
  const CopyBack copy = copy_back_for(kOp, param, param_copy, level);

  float* p = ptr(param);
  const float* g = ptr(grad);
  float* buf = use_momentum ? ptr(momentum_buffer) : nullptr;
  for_each_tile(param.numel(), [&](int64_t begin, int64_t len) {
    run_tile(copy, p, begin, len, [&](int64_t b, int64_t n) {
      kernel(p + b, g + b, buf == nullptr ? nullptr : buf + b, n, s);
    });
  });
}

void adagrad_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg_sq,
                  const AdagradParams& params, int64_t step, SimdLevel simd,
                  const at::Tensor& param_copy) {
  constexpr const char* kOp = "adagrad_step";
  check_nonnegative(kOp, "lr", params.lr);
  check_nonnegative(kOp, "lr_decay", params.lr_decay);
  check_nonnegative(kOp, "weight_decay", params.weight_decay);
  check_nonnegative(kOp, "initial_accumulator_value", params.initial_accumulator_value);
  check_positive(kOp, "eps", params.eps);
  check_step(kOp, step);
  check_tensors(kOp, {{"param", &param}, {"grad", &grad}, {"exp_avg_sq", &exp_avg_sq}});
  const detail::AdagradScalars s = detail::adagrad_scalars(params, step);
  if (!param.device().is_cpu()) return detail::adagrad_tensor_ops(param, grad, exp_avg_sq, s, param_copy);
  const SimdLevel level = resolve_simd_level(simd);
  const auto kernel = detail::kernel_table(level).adagrad;
  const CopyBack copy = copy_back_for(kOp, param, param_copy, level);

  float* p = ptr(param);
  const float* g = ptr(grad);
  float* sum = ptr(exp_avg_sq);
  for_each_tile(param.numel(), [&](int64_t begin, int64_t len) {
    run_tile(copy, p, begin, len,
             [&](int64_t b, int64_t n) { kernel(p + b, g + b, sum + b, n, s); });
  });
}

void lion_step(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg,
               const LionParams& params, int64_t step, SimdLevel simd,
               const at::Tensor& param_copy) {
  constexpr const char* kOp = "lion_step";
  check_nonnegative(kOp, "lr", params.lr);
  check_beta(kOp, "beta1", params.beta1);
  check_beta(kOp, "beta2", params.beta2);
  check_nonnegative(kOp, "weight_decay", params.weight_decay);
  check_step(kOp, step);
  check_tensors(kOp, {{"param", &param}, {"grad", &grad}, {"exp_avg", &exp_avg}});
  const detail::LionScalars s = detail::lion_scalars(params, step);
  if (!param.device().is_cpu()) return detail::lion_tensor_ops(param, grad, exp_avg, s, param_copy);
  const SimdLevel level = resolve_simd_level(simd);
  const auto kernel = detail::kernel_table(level).lion;
  const CopyBack copy = copy_back_for(kOp, param, param_copy, level);

  float* p = ptr(param);
  const float* g = ptr(grad);
  float* m = ptr(exp_avg);
  for_each_tile(param.numel(), [&](int64_t begin, int64_t len) {
    run_tile(copy, p, begin, len, [&](int64_t b, int64_t n) { kernel(p + b, g + b, m + b, n, s); });
  });
}

void convert_fp32_to(at::Tensor dst, const at::Tensor& src, SimdLevel simd) {
  constexpr const char* kOp = "convert_fp32_to";
  DS_CHECK(src.defined() && dst.defined(), kOp, ": src and dst must be defined tensors");
  check_tensors(kOp, {{"src", &src}});
  const CopyBack copy = make_copy_back(kOp, "dst", dst, "src", src, resolve_simd_level(simd));
  const float* s = ptr(src);
  for_each_tile(src.numel(),
                [&](int64_t begin, int64_t len) { copy.fn(s + begin, copy.out + begin, len); });
}

}  // namespace deepspeed::ops
