// Text generation with a KV cache for the Llama family (deepspeed/models/llama.h), as transformers' `generate` does
// it: prompts of different lengths are left-padded into one batch (the padding masked out, rotary positions counted
// from each prompt's first real token), the whole batch's prompts run once (prefill) filling the cache, then one
// token per row per step (decode), each step's scores processed and the next tokens chosen by
// deepspeed/inference/logits_processing.h until every row has stopped or the token limit is reached.
//
//   deepspeed::inference::GenerationConfig g;
//   g.max_new_tokens = 64;
//   auto out = deepspeed::inference::generate(*model, {{1, 15043, 29892}, {1, 450}}, g);
//   // out.tokens[i]: prompt i's new tokens, up to and including its stop token
//
// Under tensor parallelism every rank of the group calls it with the same prompts and config (and seed): each holds
// its heads' cache and the logits are gathered, so every rank chooses the same tokens.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "deepspeed/inference/generation_config.h"
#include "deepspeed/models/llama.h"

namespace deepspeed::inference {

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // per prompt: the new tokens, up to and including its first stop token
};

// The positions a generate call of `prompts` holds per row: the longest prompt plus the new-token limit (the cache's
// capacity, which init_inference bounds by max_out_tokens).
int64_t positions_needed(const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& cfg);

// What generate needs of a model with a KV cache (models::LlamaForCausalLMImpl's make_kv_cache and decode; a model of
// one's own fills these with its own): an empty cache for a batch and a capacity, and the last position's fp32
// logits [batch, vocab] of new tokens at given positions, appended to the cache.
struct CachedDecoder {
  std::function<models::LlamaKVCache(int64_t batch, int64_t capacity)> make_cache;
  std::function<at::Tensor(const at::Tensor& tokens, const at::Tensor& positions, models::LlamaKVCache& cache)> decode;
  c10::Device device = c10::Device(c10::kCPU);
};

// Prompts: token ids (each non-empty). Pads with cfg.pad_token_id (else eos_token_id[0], else 0) on the left.
// Throws std::invalid_argument for an empty prompt list or prompt, ConfigError for a bad config.
GenerateResult generate(const CachedDecoder& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& cfg);
GenerateResult generate(models::LlamaForCausalLMImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerationConfig& cfg);

}  // namespace deepspeed::inference
