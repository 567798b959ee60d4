// The Llama-family modules (deepspeed/models/llama.h), in transformers' arithmetic order.
#include "deepspeed/models/llama.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

#include "deepspeed/error.h"

namespace deepspeed::models {
namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// transformers' rotate_half: (x1, x2) -> (-x2, x1) over the last dimension's halves.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

at::Tensor rope_inverse_frequencies(const LlamaConfig& cfg) {
  const int64_t dim = cfg.head_dim;
  // As transformers: base ** (arange(0, dim, 2) / dim) in fp32, then its inverse.
  const at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
  at::Tensor inv_freq = 1.0 / at::pow(cfg.rope_theta, exponents);
  const RopeScaling& s = cfg.rope_scaling;
  if (s.type == "linear") return inv_freq / s.factor;
  if (s.type != "llama3") return inv_freq;
  // Llama 3.1's scaling: long wavelengths divided by the factor, short ones kept, a smooth blend between.
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium =
      at::logical_and(at::logical_not(wavelen < high_wavelen), at::logical_not(wavelen > low_wavelen));
  return at::where(medium, smoothed, scaled);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& positions) {
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.unsqueeze(0);  // [seq, dim / 2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor normed = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& cfg)
    : heads_(cfg.num_attention_heads), kv_heads_(cfg.num_key_value_heads), head_dim_(cfg.head_dim) {
  const int64_t h = cfg.hidden_size;
  q_proj_ = register_module("q_proj", linear(h, heads_ * head_dim_, cfg.qkv_bias));
  k_proj_ = register_module("k_proj", linear(h, kv_heads_ * head_dim_, cfg.qkv_bias));
  v_proj_ = register_module("v_proj", linear(h, kv_heads_ * head_dim_, cfg.qkv_bias));
  o_proj_ = register_module("o_proj", linear(heads_ * head_dim_, h, cfg.o_bias));
  if (cfg.qk_norm) {
    q_norm_ = register_module("q_norm", LlamaRMSNorm(head_dim_, cfg.rms_norm_eps));
    k_norm_ = register_module("k_norm", LlamaRMSNorm(head_dim_, cfg.rms_norm_eps));
  }
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t b = x.size(0), s = x.size(1);
  // [batch, seq, heads, head_dim]; Qwen3 normalises each head before the rotation.
  at::Tensor q = q_proj_->forward(x).view({b, s, heads_, head_dim_});
  at::Tensor k = k_proj_->forward(x).view({b, s, kv_heads_, head_dim_});
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  const at::Tensor v = v_proj_->forward(x).view({b, s, kv_heads_, head_dim_}).transpose(1, 2);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  const at::Tensor out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                          /*is_causal=*/true, /*scale=*/std::nullopt,
                                                          /*enable_gqa=*/kv_heads_ != heads_);
  return o_proj_->forward(out.transpose(1, 2).reshape({b, s, heads_ * head_dim_}));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& cfg) {
  gate_proj_ = register_module("gate_proj", linear(cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias));
  up_proj_ = register_module("up_proj", linear(cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias));
  down_proj_ = register_module("down_proj", linear(cfg.intermediate_size, cfg.hidden_size, cfg.mlp_bias));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  return down_proj_->forward(at::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& cfg) {
  self_attn_ = register_module("self_attn", LlamaAttention(cfg));
  mlp_ = register_module("mlp", LlamaMLP(cfg));
  input_layernorm_ = register_module("input_layernorm", LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), cos, sin);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& cfg) : cfg_(cfg) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) layers_->push_back(LlamaDecoderLayer(cfg));
  norm_ = register_module("norm", LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
  inv_freq_ = rope_inverse_frequencies(cfg);
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens) {
  DS_CHECK(tokens.dim() == 2, "Llama: tokens must be [batch, seq], got ", tokens.sizes());
  const int64_t seq = tokens.size(1);
  DS_CHECK_T(ConfigError, !cfg_.sliding_window || seq <= *cfg_.sliding_window, "config.json: sliding_window ",
             cfg_.sliding_window.value_or(0), " is shorter than the sequence of ", seq,
             " tokens (sliding-window attention is not implemented)");
  at::Tensor h = embed_tokens->forward(tokens);
  const at::Tensor positions = at::arange(seq, at::TensorOptions().dtype(at::kLong).device(tokens.device()));
  auto [cos, sin] = rope_cos_sin(inv_freq_.to(tokens.device()), positions);
  cos = cos.to(h.scalar_type());
  sin = sin.to(h.scalar_type());
  for (const auto& layer : *layers_) h = layer->as<LlamaDecoderLayerImpl>()->forward(h, cos, sin);
  return norm_->forward(h);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& cfg) : cfg_(cfg) {
  model_ = register_module("model", LlamaModel(cfg));
  if (!cfg.tie_word_embeddings)
    lm_head_ = register_module("lm_head", linear(cfg.hidden_size, cfg.vocab_size, /*bias=*/false));
  // transformers' _init_weights: normal(0, initializer_range) for every Linear and Embedding weight, zero biases;
  // the RMSNorms start at one.
  at::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    if (name.find("norm.weight") != std::string::npos) continue;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
      item.value().zero_();
    else
      item.value().normal_(0.0, cfg.initializer_range);
  }
}

at::Tensor LlamaForCausalLMImpl::logits(const at::Tensor& tokens) {
  const at::Tensor h = model_->forward(tokens);
  return lm_head_ ? lm_head_->forward(h) : at::linear(h, model_->embed_tokens->weight);
}

at::Tensor LlamaForCausalLMImpl::forward(const at::Tensor& tokens, const at::Tensor& targets) {
  const at::Tensor l = logits(tokens);
  // transformers computes the loss in fp32.
  return at::cross_entropy_loss(l.reshape({-1, l.size(-1)}).to(at::kFloat), targets.reshape({-1}), /*weight=*/{},
                                at::Reduction::Mean, /*ignore_index=*/-100);
}

}  // namespace deepspeed::models
