#include "gpt_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

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
  if (c.moe.enabled()) {
    const int64_t blocks = c.num_moe_blocks();
    if (blocks < 1) fail("moe needs at least 2 layers (MoE blocks are 1, 3, ...), got " + std::to_string(c.layers));
    const auto n = static_cast<int64_t>(c.moe.num_experts.size());
    if (n != 1 && n != blocks)
      fail("moe.num_experts has " + std::to_string(n) + " counts; give one, or one per MoE block (" +
           std::to_string(blocks) + ")");
    if (c.shard_blocks) fail("moe blocks cannot be ZeRO-3 units (MoE works with ZeRO stages 0-2)");
  }
  if (c.dropout < 0 || c.dropout >= 1)
    fail("dropout must be in [0, 1), got " + std::to_string(c.dropout));
  if (c.tiled_mlp_tokens < 0 || c.tiled_loss_tokens < 0)
    fail("tiled_mlp_tokens and tiled_loss_tokens must be >= 0 (0: untiled), got " + std::to_string(c.tiled_mlp_tokens) +
         " and " + std::to_string(c.tiled_loss_tokens));
  const bool tiled = c.tiled_mlp_tokens > 0 || c.tiled_loss_tokens > 0;
  if (tiled && c.tensor_parallel.is_member()) fail("sequence tiling does not combine with tensor parallelism yet");
  if (c.tiled_loss_tokens > 0 && c.shard_blocks && !c.tied_head)
    fail("the tiled loss does not combine with an untied head that is a ZeRO-3 unit (shard_blocks) yet");
}

at::Tensor maybe_dropout(const at::Tensor& x, double p, bool training) {
  return p > 0 ? at::dropout(x, p, training) : x;
}

void init_gpt_weights(torch::nn::Module& module, int64_t layers, std::optional<at::Generator> generator) {
  at::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  const c10::optional<at::Generator> gen = generator ? c10::optional<at::Generator>(*generator) : c10::nullopt;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    at::Tensor& p = item.value();
    if (name.find("ln") != std::string::npos) continue;
    if (p.dim() == 1) {
      p.zero_();
      continue;
    }
    // Drawn in host memory from the CPU generator wherever the parameter lives: a block built under zero::Init on a
    // GPU is gathered there for this, and the device's own generator would give another model than plain
    // construction does (Stage3.ConstructionTimePartitionStartsFromTheSameValues).
    at::Tensor draw = p.is_cpu() ? p : at::empty(p.sizes(), p.options().device(at::kCPU));
    draw.normal_(0.0, name.find("proj.weight") != std::string::npos ? residual_std : 0.02, gen);
    if (!p.is_cpu()) p.copy_(draw);
  }
}

std::optional<at::Generator> layer_generator(const GPTConfig& cfg, int64_t layer_index) {
  if (!cfg.init_seed) return std::nullopt;
  return at::detail::createCPUGenerator(*cfg.init_seed + static_cast<uint64_t>(layer_index));
}

}  // namespace deepspeed::models
