#include "gpt_init.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace deepspeed::models {

void check_config(const GPTConfig& c) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("GPTConfig: " + what); };
  if (c.vocab_size < 1) fail("vocab_size must be >= 1, got " + std::to_string(c.vocab_size));
  if (c.seq_len < 1) fail("seq_len must be >= 1, got " + std::to_string(c.seq_len));
  if (c.layers < 1) fail("layers must be >= 1, got " + std::to_string(c.layers));
  if (c.heads < 1 || c.hidden % c.heads != 0)
    fail("hidden (" + std::to_string(c.hidden) + ") must be a multiple of heads (" +
         std::to_string(c.heads) + ")");
  if (c.dropout < 0 || c.dropout >= 1)
    fail("dropout must be in [0, 1), got " + std::to_string(c.dropout));
}

at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) {
  return p > 0 ? at::dropout(x, p, training) : x;
}

void init_gpt_weights(torch::nn::Module& module, int64_t layers) {
  at::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    if (name.find("ln") != std::string::npos) continue;
    if (p.dim() == 1) {
      p.zero_();
    } else if (name.find("proj.weight") != std::string::npos) {
      p.normal_(0.0, residual_std);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}

}  // namespace deepspeed::models
