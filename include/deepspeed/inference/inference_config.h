// The configuration of deepspeed::init_inference, DeepSpeed's DeepSpeedInferenceConfig by its key names, read from
// the JSON a user passes as `config=` to deepspeed.init_inference:
//
//   {"dtype": "bf16", "tensor_parallel": {"tp_size": 2}, "max_out_tokens": 2048, "replace_with_kernel_inject": true}
//
// Built: dtype (fp32 / fp16 / bf16 in any of DeepSpeed's spellings: "fp16", "float16", "half", "torch.float16", ...),
// tensor_parallel.tp_size (and the legacy mp_size), max_out_tokens (prompt plus generated tokens per sequence: the
// KV cache's bound), replace_with_kernel_inject / kernel_inject (each layer's q/k/v and gate/up projections fused
// into one matmul each and, on a CPU, the linear weights packed for oneDNN: LlamaForCausalLMImpl::inject_kernels;
// attention is scaled_dot_product_attention on a preallocated cache either way). Keys for what is not built here (CUDA
// graphs, Triton, ZeRO-Inference, quantization, MoE inference, injection policies, checkpoint descriptions, ...) are
// refused by name when they ask for something other than DeepSpeed's default; an unknown key is refused as DeepSpeed's
// pydantic model refuses it.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace deepspeed::inference {

struct InferenceConfig {
  c10::ScalarType dtype = c10::ScalarType::Half;  // DeepSpeed's default (torch.float16)
  int tp_size = 1;
  int64_t max_out_tokens = 1024;
  bool replace_with_kernel_inject = false;

  // ConfigError on one line naming `source_name` and the key.
  static InferenceConfig from_json(const std::string& text, const std::string& source_name = "inference config");
  static InferenceConfig from_file(const std::string& path);
  // DeepSpeed's dtype spellings; ConfigError naming `source_name` for another.
  static c10::ScalarType parse_dtype(const std::string& name, const std::string& source_name);
};

}  // namespace deepspeed::inference
