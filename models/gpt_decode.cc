// The GPT's incremental decoding (gpt.h: make_kv_cache, decode): the Llama family's cache layout and mask
// (deepspeed/models/llama.h: LlamaKVCache, kv_cache_mask), this model's attention written out over the cache.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "gpt.h"
#include "gpt_init.h"

namespace deepspeed::models {

at::Tensor CausalSelfAttentionImpl::forward_cached(const at::Tensor& x, const at::Tensor& mask, at::Tensor& keys,
                                                   at::Tensor& values, int64_t start) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2) / heads_;
  const at::Tensor qkv = qkv_->forward(x).view({b, t, 3, heads_, d}).permute({2, 0, 3, 1, 4});  // [3, b, h, t, d]
  keys.narrow(2, start, t).copy_(qkv[1]);
  values.narrow(2, start, t).copy_(qkv[2]);
  const at::Tensor k = keys.narrow(2, 0, start + t), v = values.narrow(2, 0, start + t);
  at::Tensor scores = at::matmul(qkv[0], k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  // Without a mask: a prefill from position 0 (causal) or one new position (sees everything before it).
  const at::Tensor allowed = mask.defined() ? mask : at::ones({t, start + t}, x.options().dtype(at::kBool)).tril(start);
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  const at::Tensor y = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, heads_ * d});
  return proj_->forward(y);
}

at::Tensor GPTBlockImpl::forward_cached(const at::Tensor& x, const at::Tensor& mask, at::Tensor& keys,
                                        at::Tensor& values, int64_t start) {
  const at::Tensor h = x + attn_->forward_cached(ln1_->forward(x), mask, keys, values, start);
  return h + mlp(ln2_->forward(h));
}

LlamaKVCache GPTImpl::make_kv_cache(int64_t batch, int64_t capacity) const {
  const bool plain = !cfg_.tensor_parallel.is_member() && !cfg_.sequence_parallel.is_member() && !cfg_.shard_blocks &&
                     !cfg_.moe.enabled();
  if (!plain)
    throw std::invalid_argument(
        "GPT decode: only a dense model without tensor or sequence parallelism or ZeRO-3 units");
  if (capacity > cfg_.seq_len)
    throw std::invalid_argument("GPT decode: " + std::to_string(capacity) + " positions exceed seq_len " +
                                std::to_string(cfg_.seq_len));
  return LlamaKVCache::empty(cfg_.layers, batch, cfg_.heads, capacity, cfg_.hidden / cfg_.heads,
                             wte_->weight.options());
}

at::Tensor GPTImpl::decode(const at::Tensor& tokens, const at::Tensor& positions, LlamaKVCache& cache) {
  at::NoGradGuard no_grad;
  const int64_t t = tokens.size(1), start = cache.length;
  if (start + t > cache.capacity())
    throw std::invalid_argument("GPT decode: " + std::to_string(start + t) + " positions exceed the cache's " +
                                std::to_string(cache.capacity()));
  const at::Tensor mask = kv_cache_mask(cache, t);
  at::Tensor x = wte_->forward(tokens) + wpe_->forward(positions);
  for (size_t i = 0; i < blocks_->size(); ++i)
    x = blocks_->ptr(i)->as<GPTBlockImpl>()->forward_cached(x, mask, cache.keys[i], cache.values[i], start);
  cache.length = start + t;
  const at::Tensor h = ln_f_->forward(x.narrow(1, t - 1, 1));
  return head(h).select(1, 0).to(at::kFloat);
}

}  // namespace deepspeed::models
