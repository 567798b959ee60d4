// The Llama-family modules (deepspeed/models/llama.h), in transformers' arithmetic order.
#include "deepspeed/models/llama.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

#include "deepspeed/checkpointing.h"
#include "deepspeed/error.h"
#include "deepspeed/sequence/loss.h"
#include "deepspeed/sequence/tiling.h"
#include "deepspeed/tp/parallel_linear.h"

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

// transformers' _init_weights, module by module (so a unit built under zero::Init is initialised before it is
// partitioned): normal(0, initializer_range) for Linear and Embedding weights, zero biases; RMSNorms stay at one.
void init_like_transformers(torch::nn::Module& m, double range) {
  at::NoGradGuard no_grad;
  for (auto& item : m.named_parameters()) {
    const std::string& name = item.key();
    if (name.find("norm.weight") != std::string::npos) continue;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0)
      item.value().zero_();
    else
      item.value().normal_(0.0, range);
  }
}

enum class Split { kNone, kColumn, kRow };

// A Linear built and initialised whole, then (under tensor parallelism) split over the group, registered on
// `parent` under `name` (transformers' name: a split keeps the parameter names).
torch::nn::AnyModule add_linear(torch::nn::Module& parent, const std::string& name, int64_t in, int64_t out, bool bias,
                                const LlamaConfig& cfg, Split split) {
  torch::nn::Linear full = linear(in, out, bias);
  init_like_transformers(*full, cfg.initializer_range);
  torch::nn::AnyModule m(full);
  if (cfg.tensor_parallel.is_member() && split == Split::kColumn)
    m = torch::nn::AnyModule(tp::ColumnParallelLinear(full, cfg.tensor_parallel));
  else if (cfg.tensor_parallel.is_member() && split == Split::kRow)
    m = torch::nn::AnyModule(tp::RowParallelLinear(full, cfg.tensor_parallel));
  parent.register_module(name, m.ptr());
  return m;
}

int64_t tp_size(const LlamaConfig& cfg) { return cfg.tensor_parallel.is_member() ? cfg.tensor_parallel.size() : 1; }

// Causal attention of q [batch, heads, seq, dim] over k, v [batch, kv heads, seq, dim] (grouped-query when fewer).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/k.size(1) != q.size(1));
}

void check_tiling(const LlamaConfig& cfg) {
  DS_CHECK_T(ConfigError, cfg.tiled_mlp_tokens >= 0 && cfg.tiled_loss_tokens >= 0,
             "Llama: tiled_mlp_tokens and tiled_loss_tokens must be >= 0 (0: untiled), got ", cfg.tiled_mlp_tokens,
             " and ", cfg.tiled_loss_tokens);
  if (cfg.tiled_mlp_tokens == 0 && cfg.tiled_loss_tokens == 0) return;
  DS_CHECK_T(ConfigError, !cfg.tensor_parallel.is_member(),
             "Llama: sequence tiling does not combine with tensor parallelism yet");
  DS_CHECK_T(ConfigError, cfg.tiled_loss_tokens == 0 || !cfg.shard_layers || cfg.tie_word_embeddings,
             "Llama: the tiled loss does not combine with an untied head that is a ZeRO-3 unit (shard_layers) yet");
}

// What sequence parallelism needs of the config: the query heads divisible by the group's size, and the key/value
// heads either divisible by it or dividing it (then each is replicated to one per rank, as UlyssesSPAttentionHF does).
void check_sequence_parallel(const LlamaConfig& cfg) {
  if (!cfg.sequence_parallel.is_member()) return;
  const int64_t p = cfg.sequence_parallel.size();
  DS_CHECK_T(ConfigError, !cfg.tensor_parallel.is_member(),
             "Llama: sequence parallelism does not combine with "
             "tensor parallelism yet");
  DS_CHECK_T(ConfigError, cfg.num_attention_heads % p == 0, "config.json: num_attention_heads ",
             cfg.num_attention_heads, " does not split over ", p, " sequence-parallel ranks");
  DS_CHECK_T(ConfigError, cfg.num_key_value_heads % p == 0 || p % cfg.num_key_value_heads == 0,
             "config.json: num_key_value_heads ", cfg.num_key_value_heads, " neither splits over nor divides ", p,
             " sequence-parallel ranks (Ulysses gives each rank whole key/value heads, replicated when there are "
             "fewer than ranks)");
}

// What tensor parallelism needs of the config: each split count divisible by the group's size.
void check_tensor_parallel(const LlamaConfig& cfg) {
  const int64_t t = tp_size(cfg);
  if (t == 1) return;
  DS_CHECK_T(ConfigError, !cfg.shard_layers,
             "Llama: tensor parallelism does not combine with ZeRO-3 units "
             "(shard_layers)");
  const std::pair<const char*, int64_t> counts[] = {{"num_attention_heads", cfg.num_attention_heads},
                                                    {"num_key_value_heads", cfg.num_key_value_heads},
                                                    {"intermediate_size", cfg.intermediate_size},
                                                    {"vocab_size", cfg.vocab_size}};
  for (const auto& [key, n] : counts)
    DS_CHECK_T(ConfigError, n % t == 0, "config.json: ", key, " ", n, " does not split over ", t,
               " tensor-parallel ranks");
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

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t dim, double eps, deepspeed::comm::ProcessGroup partial_over)
    : eps_(eps), partial_over_(std::move(partial_over)) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor normed = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  const at::Tensor w = partial_over_.is_member() ? tp::copy_to_region(weight, partial_over_) : weight;
  return w * normed.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& cfg)
    : heads_(cfg.num_attention_heads / tp_size(cfg)),
      kv_heads_(cfg.num_key_value_heads / tp_size(cfg)),
      head_dim_(cfg.head_dim) {
  const int64_t h = cfg.hidden_size, q = cfg.num_attention_heads * head_dim_, kv = cfg.num_key_value_heads * head_dim_;
  q_proj_ = add_linear(*this, "q_proj", h, q, cfg.qkv_bias, cfg, Split::kColumn);
  k_proj_ = add_linear(*this, "k_proj", h, kv, cfg.qkv_bias, cfg, Split::kColumn);
  v_proj_ = add_linear(*this, "v_proj", h, kv, cfg.qkv_bias, cfg, Split::kColumn);
  o_proj_ = add_linear(*this, "o_proj", q, h, cfg.o_bias, cfg, Split::kRow);
  if (cfg.qk_norm) {
    q_norm_ = register_module("q_norm", LlamaRMSNorm(head_dim_, cfg.rms_norm_eps, cfg.tensor_parallel));
    k_norm_ = register_module("k_norm", LlamaRMSNorm(head_dim_, cfg.rms_norm_eps, cfg.tensor_parallel));
  }
  if (cfg.sequence_parallel.is_member()) {
    // Whole sequences of some heads, [batch, seq, heads / P, dim] in and out.
    auto local = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2);
    };
    ulysses_ = register_module("ulysses", deepspeed::sequence::DistributedAttention(local, cfg.sequence_parallel));
    const int64_t p = cfg.sequence_parallel.size();
    if (kv_heads_ < p) kv_replicas_ = p / kv_heads_;
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> LlamaAttentionImpl::project(const at::Tensor& x, const at::Tensor& cos,
                                                                           const at::Tensor& sin) {
  const int64_t b = x.size(0), s = x.size(1);
  // [batch, seq, heads, head_dim]; Qwen3 normalises each head before the rotation.
  at::Tensor q, k, v;
  if (fused_qkv_weight_.defined() && !at::GradMode::is_enabled()) {  // inject_kernels: one matmul
    const at::Tensor qkv = packed_qkv_.packed() ? packed_qkv_(x) : at::linear(x, fused_qkv_weight_, fused_qkv_bias_);
    const int64_t nq = heads_ * head_dim_, nkv = kv_heads_ * head_dim_;
    q = qkv.narrow(-1, 0, nq).view({b, s, heads_, head_dim_});
    k = qkv.narrow(-1, nq, nkv).view({b, s, kv_heads_, head_dim_});
    v = qkv.narrow(-1, nq + nkv, nkv).view({b, s, kv_heads_, head_dim_});
  } else {
    q = q_proj_.forward<at::Tensor>(x).view({b, s, heads_, head_dim_});
    k = k_proj_.forward<at::Tensor>(x).view({b, s, kv_heads_, head_dim_});
    v = v_proj_.forward<at::Tensor>(x).view({b, s, kv_heads_, head_dim_});
  }
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  return {q, k, v};
}

at::Tensor LlamaAttentionImpl::forward_cached(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                              const at::Tensor& mask, at::Tensor& keys, at::Tensor& values,
                                              int64_t start) {
  const int64_t b = x.size(0), s = x.size(1);
  auto [q, k, v] = project(x, cos, sin);
  keys.narrow(2, start, s).copy_(k);
  values.narrow(2, start, s).copy_(v.transpose(1, 2));
  // Without a mask (no padding): a prefill from position 0 is causal; one new position sees everything before it.
  const bool causal = !mask.defined() && s > 1;
  const at::Tensor out = at::scaled_dot_product_attention(
      q, keys.narrow(2, 0, start + s), values.narrow(2, 0, start + s),
      mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt, /*dropout_p=*/0.0, causal,
      /*scale=*/std::nullopt, /*enable_gqa=*/kv_heads_ != heads_);
  return output_projection(out.transpose(1, 2).reshape({b, s, heads_ * head_dim_}));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t b = x.size(0), s = x.size(1);
  auto [q, k, v] = project(x, cos, sin);
  // [batch, seq, heads, dim]: this rank's tokens, exchanged by Ulysses for whole sequences of some heads. With fewer
  // key/value heads than ranks, each is repeated so that every rank gets the one its query heads share (the copies'
  // gradients add up in the repeat's backward).
  at::Tensor out;
  if (ulysses_) {
    at::Tensor kl = k.transpose(1, 2), vl = v;
    if (kv_replicas_ > 1) {
      kl = kl.repeat_interleave(kv_replicas_, 2);
      vl = vl.repeat_interleave(kv_replicas_, 2);
    }
    out = ulysses_->forward(q.transpose(1, 2), kl, vl);
  } else {
    out = causal_attention(q, k, v.transpose(1, 2)).transpose(1, 2);
  }
  return output_projection(out.reshape({b, s, heads_ * head_dim_}));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& cfg) : tile_(cfg.tiled_mlp_tokens) {
  const int64_t h = cfg.hidden_size, i = cfg.intermediate_size;
  gate_proj_ = add_linear(*this, "gate_proj", h, i, cfg.mlp_bias, cfg, Split::kColumn);
  up_proj_ = add_linear(*this, "up_proj", h, i, cfg.mlp_bias, cfg, Split::kColumn);
  down_proj_ = add_linear(*this, "down_proj", i, h, cfg.mlp_bias, cfg, Split::kRow);
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  if (tile_ == 0) return untiled(x);
  return sequence::tiled_compute([this](const at::Tensor& t) { return untiled(t); }, x, parameters(), tile_);
}

at::Tensor LlamaMLPImpl::untiled(const at::Tensor& x) {
  if (fused_gate_up_weight_.defined() && !at::GradMode::is_enabled()) {  // inject_kernels: one matmul
    const at::Tensor gate_up =
        packed_gate_up_.packed() ? packed_gate_up_(x) : at::linear(x, fused_gate_up_weight_, fused_gate_up_bias_);
    const int64_t inner = gate_up.size(-1) / 2;
    const at::Tensor inner_act = at::silu(gate_up.narrow(-1, 0, inner)) * gate_up.narrow(-1, inner, inner);
    return packed_down_.packed() ? packed_down_(inner_act) : down_proj_.forward<at::Tensor>(inner_act);
  }
  return down_proj_.forward<at::Tensor>(at::silu(gate_proj_.forward<at::Tensor>(x)) * up_proj_.forward<at::Tensor>(x));
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

at::Tensor LlamaDecoderLayerImpl::forward_cached(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                                 const at::Tensor& mask, at::Tensor& keys, at::Tensor& values,
                                                 int64_t start) {
  const at::Tensor h =
      x + self_attn_->forward_cached(input_layernorm_->forward(x), cos, sin, mask, keys, values, start);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& cfg) : cfg_(cfg) {
  check_tensor_parallel(cfg);
  check_sequence_parallel(cfg);
  check_tiling(cfg);
  auto make_embedding = [&] {
    torch::nn::Embedding e(cfg.vocab_size, cfg.hidden_size);
    init_like_transformers(*e, cfg.initializer_range);
    return e;
  };
  // A tied embedding is also the head, used outside its own forward: it stays with the parameters gathered for the
  // whole step.
  if (cfg.shard_layers && !cfg.tie_word_embeddings) {
    embed_unit_ = register_module("embed_tokens", deepspeed::zero::shard(make_embedding));
  } else if (cfg.tensor_parallel.is_member()) {
    embed_tokens_ = torch::nn::AnyModule(tp::VocabParallelEmbedding(make_embedding()->weight, cfg.tensor_parallel));
    register_module("embed_tokens", embed_tokens_.ptr());
  } else {
    embed_tokens_ = torch::nn::AnyModule(make_embedding());
    register_module("embed_tokens", embed_tokens_.ptr());
  }
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    if (cfg.shard_layers)
      layers_->push_back(deepspeed::zero::shard([&] { return LlamaDecoderLayer(cfg); }));
    else
      layers_->push_back(LlamaDecoderLayer(cfg));
  }
  norm_ = register_module("norm", LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps));
  inv_freq_ = rope_inverse_frequencies(cfg);
}

at::Tensor LlamaModelImpl::embed(const at::Tensor& tokens) {
  return embed_unit_ ? embed_unit_->forward(tokens) : embed_tokens_.forward<at::Tensor>(tokens);
}

const at::Tensor& LlamaModelImpl::embedding_weight() const {
  if (embed_unit_) return embed_unit_->module().weight;
  if (const auto* split = embed_tokens_.ptr()->as<tp::VocabParallelEmbeddingImpl>()) return split->weight;
  return embed_tokens_.ptr()->as<torch::nn::EmbeddingImpl>()->weight;
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& tokens) {
  DS_CHECK(tokens.dim() == 2, "Llama: tokens must be [batch, seq], got ", tokens.sizes());
  const int64_t seq = tokens.size(1);
  cfg_.check_sequence(seq);
  at::Tensor h = embed(tokens);
  // Under sequence parallelism this rank holds tokens [r * seq, (r + 1) * seq) of each sequence.
  const int64_t first = cfg_.sequence_parallel.is_member() ? cfg_.sequence_parallel.rank() * seq : 0;
  const at::Tensor positions =
      at::arange(first, first + seq, at::TensorOptions().dtype(at::kLong).device(tokens.device()));
  auto [cos, sin] = rope_cos_sin(inv_freq_.to(tokens.device()), positions);
  cos = cos.to(h.scalar_type());
  sin = sin.to(h.scalar_type());
  const bool recompute = cfg_.gradient_checkpointing && is_training() && at::GradMode::is_enabled();
  for (const auto& layer : *layers_) {
    // By value: a checkpointed layer reruns in backward, after this frame is gone.
    auto run = [cos, sin, unit = layer->as<ShardedLlamaDecoderLayer>(),
                plain = layer->as<LlamaDecoderLayerImpl>()](const at::Tensor& x) {
      return unit != nullptr ? unit->forward(x, cos, sin) : plain->forward(x, cos, sin);
    };
    h = recompute ? checkpointing::checkpoint(run, h) : run(h);
  }
  return norm_->forward(h);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& cfg) : cfg_(cfg) {
  model_ = register_module("model", LlamaModel(cfg));
  if (cfg.tie_word_embeddings) return;
  auto make_head = [&] {
    torch::nn::Linear head = linear(cfg.hidden_size, cfg.vocab_size, /*bias=*/false);
    init_like_transformers(*head, cfg.initializer_range);
    return head;
  };
  if (cfg.shard_layers) {
    lm_head_unit_ = register_module("lm_head", deepspeed::zero::shard(make_head));
    return;
  }
  lm_head_ = cfg.tensor_parallel.is_member()
                 ? torch::nn::AnyModule(tp::ColumnParallelLinear(make_head(), cfg.tensor_parallel))
                 : torch::nn::AnyModule(make_head());
  register_module("lm_head", lm_head_.ptr());
}

at::Tensor LlamaForCausalLMImpl::local_logits(const at::Tensor& tokens) { return head(model_->forward(tokens)); }

at::Tensor LlamaForCausalLMImpl::head(const at::Tensor& h) {
  if (packed_head_.packed() && !at::GradMode::is_enabled()) return packed_head_(h);  // inject_kernels on a CPU
  if (lm_head_unit_) return lm_head_unit_->forward(h);
  if (!lm_head_.is_empty()) return lm_head_.forward<at::Tensor>(h);
  // Tied: the embedding's rows are the head's; under tensor parallelism this rank's vocabulary slice, whose input
  // gradient is summed over the group as a column-parallel layer's is.
  if (cfg_.tensor_parallel.is_member())
    return at::linear(tp::copy_to_region(h, cfg_.tensor_parallel), model_->embedding_weight());
  return at::linear(h, model_->embedding_weight());
}

// The mean cross-entropy with the head and loss run tiled_loss_tokens positions at a time.
at::Tensor LlamaForCausalLMImpl::tiled_loss(const at::Tensor& tokens, const at::Tensor& targets) {
  const at::Tensor h = model_->forward(tokens);
  std::vector<at::Tensor> weights;
  sequence::TileFn head;
  if (!lm_head_.is_empty()) {
    weights = lm_head_.ptr()->parameters();
    head = [this](const at::Tensor& t) { return lm_head_.forward<at::Tensor>(t); };
  } else {
    weights = {model_->embedding_weight()};
    head = [this](const at::Tensor& t) { return at::linear(t, model_->embedding_weight()); };
  }
  const at::Tensor sum = sequence::tiled_cross_entropy_sum(head, h, targets, weights, cfg_.tiled_loss_tokens);
  return sequence::sequence_parallel_mean(sum, (targets != -100).sum(), cfg_.sequence_parallel);
}

at::Tensor LlamaForCausalLMImpl::logits(const at::Tensor& tokens) {
  const at::Tensor local = local_logits(tokens);
  return cfg_.tensor_parallel.is_member() ? tp::gather_from_region(local, cfg_.tensor_parallel) : local;
}

at::Tensor LlamaForCausalLMImpl::forward(const at::Tensor& tokens, const at::Tensor& targets) {
  if (cfg_.tiled_loss_tokens > 0) return tiled_loss(tokens, targets);
  // transformers computes the loss in fp32.
  const at::Tensor l = local_logits(tokens).to(at::kFloat);
  if (cfg_.tensor_parallel.is_member())
    return tp::vocab_parallel_cross_entropy_mean(l, targets, cfg_.tensor_parallel, /*ignore_index=*/-100);
  if (cfg_.sequence_parallel.is_member()) {  // the mean over the whole sequences' positions, weighted by rank
    const at::Tensor sum = at::cross_entropy_loss(l.reshape({-1, l.size(-1)}), targets.reshape({-1}), /*weight=*/{},
                                                  at::Reduction::Sum, /*ignore_index=*/-100);
    return sequence::sequence_parallel_mean(sum, (targets != -100).sum(), cfg_.sequence_parallel);
  }
  return at::cross_entropy_loss(l.reshape({-1, l.size(-1)}), targets.reshape({-1}), /*weight=*/{}, at::Reduction::Mean,
                                /*ignore_index=*/-100);
}

}  // namespace deepspeed::models
