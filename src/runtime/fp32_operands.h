// The operands of one fp32 optimizer step over a chunk of a flat partition. A 16-bit operand (bf16/fp16 gradients,
// masters or optimizer states) is converted into an fp32 buffer; one that the step updates is rounded back to its
// own dtype afterwards (to nearest even, as any fp32-to-16-bit copy). fp32 operands are used in place. The buffers
// are kept from chunk to chunk, so the extra memory is one chunk per operand whatever the model's size.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace deepspeed::runtime {

class Fp32Operands {
 public:
  // The chunk the steps use: 2^20 elements, 4 MiB fp32 buffers whatever the model's size.
  static constexpr int64_t kChunk = int64_t{1} << 20;

  // Chunks of at most `capacity` elements; buffers allocated with `options` (fp32, where the step runs).
  Fp32Operands(int64_t capacity, at::TensorOptions options);

  // Operand `slot` (each operand of a step its own slot, 0..3) of the current chunk as fp32: `chunk` itself when it
  // is fp32 (or undefined), else the slot's buffer holding its values; `written_back`: round the buffer back into
  // `chunk` at write_back().
  at::Tensor take(const at::Tensor& chunk, int slot, bool written_back);
  // Rounds the updated operands back into their chunks, and starts the next chunk.
  void write_back();

  // One optimizer step over equal-length ranges (undefined ones stay undefined), a chunk of at most `capacity`
  // elements at a time: `step` gets each chunk's master, gradient and states as fp32 (and `copy`'s chunk as it is),
  // the gradient times `coef` (a 16-bit one in its buffer, an fp32 one in a copy: the caller's gradient is only
  // read), and what it changes in 16-bit operands is rounded back after it.
  using Step = std::function<void(const at::Tensor& master, const at::Tensor& grad, const at::Tensor& first,
                                  const at::Tensor& second, const at::Tensor& copy)>;
  void step_chunks(double coef, const at::Tensor& master, const at::Tensor& grad, const at::Tensor& first,
                   const at::Tensor& second, const at::Tensor& copy, const Step& step);

 private:
  int64_t capacity_;
  at::TensorOptions options_;
  std::vector<at::Tensor> buffers_;
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;  // (16-bit chunk, its fp32 buffer)
};

}  // namespace deepspeed::runtime
