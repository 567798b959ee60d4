#include "runtime/fp32_operands.h"

#include <ATen/ATen.h>

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

}  // namespace deepspeed::runtime
