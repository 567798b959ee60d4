// See deepspeed/inference/generate.h.
#include "deepspeed/inference/generate.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "deepspeed/inference/logits_processing.h"

namespace deepspeed::inference {

namespace {

int64_t pad_id(const GenerationConfig& cfg) {
  if (cfg.pad_token_id) return *cfg.pad_token_id;
  return cfg.eos_token_id.empty() ? 0 : cfg.eos_token_id.front();
}

// The prompts left-padded into [batch, longest] (on `device`) and which of those positions are real.
std::pair<at::Tensor, at::Tensor> left_padded(const std::vector<std::vector<int64_t>>& prompts, int64_t pad,
                                              const c10::Device& device) {
  if (prompts.empty()) throw std::invalid_argument("generate: no prompts");
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw std::invalid_argument("generate: prompt " + std::to_string(i) + " is empty");
    longest = std::max(longest, prompts[i].size());
  }
  const auto rows = static_cast<int64_t>(prompts.size()), cols = static_cast<int64_t>(longest);
  at::Tensor ids = at::full({rows, cols}, pad, at::kLong);
  at::Tensor real = at::zeros({rows, cols}, at::kBool);
  for (int64_t r = 0; r < rows; ++r) {
    const auto& p = prompts[static_cast<size_t>(r)];
    const auto n = static_cast<int64_t>(p.size());
    ids[r].narrow(0, cols - n, n).copy_(at::tensor(p, at::kLong));
    real[r].narrow(0, cols - n, n).fill_(true);
  }
  return {ids.to(device), real.to(device)};
}

// Each row's new tokens up to and including its first stop token.
std::vector<std::vector<int64_t>> cut_at_stop(const at::Tensor& generated, const GenerationConfig& cfg) {
  const at::Tensor cpu = generated.to(at::kCPU).contiguous();
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(cpu.size(0)));
  for (int64_t r = 0; r < cpu.size(0); ++r) {
    const int64_t* row = cpu[r].data_ptr<int64_t>();
    for (int64_t t = 0; t < cpu.size(1); ++t) {
      out[static_cast<size_t>(r)].push_back(row[t]);
      if (std::find(cfg.eos_token_id.begin(), cfg.eos_token_id.end(), row[t]) != cfg.eos_token_id.end()) break;
    }
  }
  return out;
}

}  // namespace

GenerateResult generate(models::LlamaForCausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& cfg) {
  CachedDecoder decoder;
  decoder.make_cache = [&model](int64_t batch, int64_t capacity) { return model.make_kv_cache(batch, capacity); };
  decoder.decode = [&model](const at::Tensor& tokens, const at::Tensor& positions, models::LlamaKVCache& cache) {
    return model.decode(tokens, positions, cache);
  };
  decoder.device = model.parameters().front().device();
  return generate(decoder, prompts, cfg);
}

GenerateResult generate(const CachedDecoder& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& cfg) {
  cfg.check("generation config");
  const c10::Device device = model.device;
  auto [ids, real] = left_padded(prompts, pad_id(cfg), device);
  const int64_t rows = ids.size(0), prompt_len = ids.size(1), limit = cfg.new_token_limit(prompt_len);
  models::LlamaKVCache cache = model.make_cache(rows, positions_needed(prompts, cfg));
  cache.valid.narrow(1, 0, prompt_len).copy_(real);
  cache.padded = !real.all().item<bool>();
  // transformers' position ids: each real token's index among its row's real tokens (padding's are unused).
  at::Tensor positions = (real.to(at::kLong).cumsum(1) - 1).clamp_min(0);
  at::Generator generator = make_generator(cfg, device);
  at::Tensor finished = at::zeros({rows}, at::TensorOptions().dtype(at::kBool).device(device));
  at::Tensor sequences = ids;
  std::vector<at::Tensor> chosen;
  at::Tensor logits = model.decode(ids, positions, cache);
  at::Tensor next_pos = positions.narrow(1, prompt_len - 1, 1) + 1;
  for (int64_t step = 0; step < limit; ++step) {
    at::Tensor next = next_tokens(process_logits(logits, sequences, cfg), cfg, &generator);
    mark_finished(next, finished, cfg);
    chosen.push_back(next);
    sequences = at::cat({sequences, next.unsqueeze(1)}, 1);
    if (step + 1 == limit || finished.all().item<bool>()) break;
    cache.valid.narrow(1, cache.length, 1).fill_(true);
    logits = model.decode(next.unsqueeze(1), next_pos, cache);
    next_pos = next_pos + 1;
  }
  GenerateResult result;
  result.tokens = cut_at_stop(at::stack(chosen, 1), cfg);
  return result;
}

int64_t positions_needed(const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& cfg) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const auto n = static_cast<int64_t>(longest);
  return n + cfg.new_token_limit(n);
}

}  // namespace deepspeed::inference
