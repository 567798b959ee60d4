#include "runtime/fp32_operands.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "deepspeed/error.h"

namespace deepspeed::runtime {

Fp32Operands::Fp32Operands(int64_t capacity, at::TensorOptions options)
    : capacity_(capacity), options_(options.dtype(at::kFloat)), buffers_(4) {}

at::Tensor Fp32Operands::take(const at::Tensor& chunk, int slot, bool written_back) {
  if (!chunk.defined() || chunk.scalar_type() == at::kFloat) return chunk;
  DS_ASSERT(slot >= 0 && slot < static_cast<int>(buffers_.size()) && chunk.numel() <= capacity_,
            "Fp32Operands: slot ", slot, " chunk of ", chunk.numel(), " elements, capacity ", capacity_);
  at::Tensor& buffer = buffers_[static_cast<size_t>(slot)];
  if (!buffer.defined()) buffer = at::empty({capacity_}, options_);
  at::Tensor values = buffer.narrow(0, 0, chunk.numel());
  values.copy_(chunk);
  if (written_back) written_.emplace_back(chunk, values);
  return values;
}

void Fp32Operands::write_back() {
  for (auto& [chunk, values] : written_) chunk.copy_(values);
  written_.clear();
}

void Fp32Operands::step_chunks(double coef, const at::Tensor& master, const at::Tensor& grad, const at::Tensor& first,
                               const at::Tensor& second, const at::Tensor& copy, const Step& step) {
  auto chunk_of = [](const at::Tensor& t, int64_t pos, int64_t len) { return t.defined() ? t.narrow(0, pos, len) : t; };
  for (int64_t pos = 0, n = master.numel(); pos < n; pos += capacity_) {
    const int64_t len = std::min(capacity_, n - pos);
    at::Tensor g = chunk_of(grad, pos, len);
    if (g.scalar_type() != at::kFloat) {
      g = take(g, 0, false);
      if (coef != 1.0) g.mul_(coef);
    } else if (coef != 1.0) {
      g = g.mul(coef);
    }
    step(take(chunk_of(master, pos, len), 1, true), g, take(chunk_of(first, pos, len), 2, true),
         take(chunk_of(second, pos, len), 3, true), chunk_of(copy, pos, len));
    write_back();
  }
}

}  // namespace deepspeed::runtime
