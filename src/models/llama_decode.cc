// Incremental decoding for the Llama family (deepspeed/models/llama.h: LlamaKVCache, decode): each call runs only the
// new positions, their keys and values written into the preallocated cache, and attention reads the cache through
// scaled_dot_product_attention with a mask for the padding and causality. Kept apart from llama.cc, whose training
// path it shares the layers with.
#include <ATen/ATen.h>

#include "deepspeed/error.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/tp/parallel_linear.h"

namespace deepspeed::models {

namespace {

// The weights (or biases, `name`) of `layers` stacked along the output features into one tensor, each layer's
// parameter then set to its rows of it (a view: the storage is shared, nothing is copied twice). Undefined when the
// layers have no such parameter.
at::Tensor stack_into_one(const std::vector<torch::nn::AnyModule*>& layers, const std::string& name) {
  std::vector<at::Tensor> parts;
  for (auto* layer : layers) {
    at::Tensor* p = layer->ptr()->named_parameters(/*recurse=*/false).find(name);
    if (p == nullptr || !p->defined()) return {};
    parts.push_back(p->detach());
  }
  at::NoGradGuard no_grad;
  const at::Tensor joined = at::cat(parts, 0);
  int64_t row = 0;
  for (auto* layer : layers) {
    at::Tensor* p = layer->ptr()->named_parameters(/*recurse=*/false).find(name);
    const int64_t rows = p->size(0);
    p->set_data(joined.narrow(0, row, rows));
    row += rows;
  }
  return joined;
}

// [batch, 1, seq, start + seq] bool: new position i (at start + i) sees the valid positions up to itself, and always
// itself (a padding position sees nothing else, and a row of a softmax must not be empty: its output is unused).
at::Tensor step_mask(const at::Tensor& valid, int64_t start, int64_t seq) {
  const int64_t total = start + seq;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(valid.device());
  const at::Tensor key = at::arange(total, opts).view({1, total});
  const at::Tensor query = at::arange(start, total, opts).view({seq, 1});
  const at::Tensor causal = key.le(query);  // [seq, total]
  const at::Tensor self = key.eq(query);
  const at::Tensor seen = valid.narrow(1, 0, total).view({valid.size(0), 1, 1, total});
  return at::logical_or(at::logical_and(seen, causal.view({1, 1, seq, total})), self.view({1, 1, seq, total}));
}

}  // namespace

LlamaKVCache LlamaKVCache::empty(int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim,
                                 const at::TensorOptions& options) {
  LlamaKVCache cache;
  for (int64_t i = 0; i < layers; ++i) {
    cache.keys.push_back(at::zeros({batch, heads, capacity, head_dim}, options));
    cache.values.push_back(at::zeros({batch, heads, capacity, head_dim}, options));
  }
  cache.valid = at::zeros({batch, capacity}, options.dtype(at::kBool));
  return cache;
}

at::Tensor kv_cache_mask(const LlamaKVCache& cache, int64_t seq) {
  // scaled_dot_product_attention's causal mask is aligned top-left: right for a prefill from 0 and for one new
  // position; anything else, or padding, takes the explicit mask.
  const bool plain = !cache.padded && (cache.length == 0 || seq == 1);
  return plain ? at::Tensor() : step_mask(cache.valid, cache.length, seq);
}

at::Tensor LlamaModelImpl::forward_cached(const at::Tensor& tokens, const at::Tensor& positions, LlamaKVCache& cache) {
  DS_CHECK(tokens.dim() == 2 && positions.sizes() == tokens.sizes(), "Llama decode: tokens ", tokens.sizes(),
           " and positions ", positions.sizes(), " must both be [batch, seq]");
  const int64_t b = tokens.size(0), seq = tokens.size(1), start = cache.length;
  DS_CHECK(static_cast<int64_t>(cache.keys.size()) == static_cast<int64_t>(layers_->size()) && cache.valid.defined() &&
               cache.valid.size(0) == b,
           "Llama decode: the cache was not made by this model for a batch of ", b);
  DS_CHECK(start + seq <= cache.capacity(), "Llama decode: ", start + seq, " positions exceed the cache's capacity ",
           cache.capacity());
  cfg_.check_sequence(start + seq);
  at::Tensor h = embed(tokens);
  auto [cos, sin] = rope_cos_sin(inv_freq_.to(tokens.device()), positions);  // [batch, seq, head_dim]
  cos = cos.to(h.scalar_type()).unsqueeze(1);
  sin = sin.to(h.scalar_type()).unsqueeze(1);
  const at::Tensor mask = kv_cache_mask(cache, seq);
  for (size_t i = 0; i < layers_->size(); ++i) {
    h = layers_->ptr(i)->as<LlamaDecoderLayerImpl>()->forward_cached(h, cos, sin, mask, cache.keys[i], cache.values[i],
                                                                     start);
  }
  cache.length = start + seq;
  return norm_->forward(h);
}

namespace {

// The packed copy of a layer that is a plain Linear (one split by tensor parallelism keeps its own forward, whose
// collectives go around the matmul); nothing where the weights do not pack (ops::packs_linear_weights).
void pack_plain_linear(ops::PackedLinear& packed, torch::nn::AnyModule& layer) {
  if (const auto* linear = layer.ptr()->as<torch::nn::LinearImpl>()) packed.pack(linear->weight, linear->bias);
}

// The weights a stacked tensor was made from (stack_into_one): in-place writes to them reach it through the shared
// storage, but count on their own version counters, which its packed copy watches.
std::vector<at::Tensor> weights_of(const std::vector<torch::nn::AnyModule*>& layers) {
  std::vector<at::Tensor> out;
  for (auto* layer : layers) out.push_back(*layer->ptr()->named_parameters(/*recurse=*/false).find("weight"));
  return out;
}

}  // namespace

void LlamaAttentionImpl::inject_kernels() {
  if (fused_qkv_weight_.defined()) return;
  fused_qkv_weight_ = stack_into_one({&q_proj_, &k_proj_, &v_proj_}, "weight");
  fused_qkv_bias_ = stack_into_one({&q_proj_, &k_proj_, &v_proj_}, "bias");
  // Column-split under tensor parallelism: still one local matmul.
  packed_qkv_.pack(fused_qkv_weight_, fused_qkv_bias_, weights_of({&q_proj_, &k_proj_, &v_proj_}));
  pack_plain_linear(packed_o_, o_proj_);
}

at::Tensor LlamaAttentionImpl::output_projection(const at::Tensor& x) {
  return packed_o_.packed() && !at::GradMode::is_enabled() ? packed_o_(x) : o_proj_.forward<at::Tensor>(x);
}

void LlamaMLPImpl::inject_kernels() {
  if (fused_gate_up_weight_.defined()) return;
  fused_gate_up_weight_ = stack_into_one({&gate_proj_, &up_proj_}, "weight");
  fused_gate_up_bias_ = stack_into_one({&gate_proj_, &up_proj_}, "bias");
  packed_gate_up_.pack(fused_gate_up_weight_, fused_gate_up_bias_, weights_of({&gate_proj_, &up_proj_}));
  pack_plain_linear(packed_down_, down_proj_);
}

void LlamaDecoderLayerImpl::inject_kernels() {
  self_attn_->inject_kernels();
  mlp_->inject_kernels();
}

void LlamaForCausalLMImpl::inject_kernels() {
  DS_CHECK(!cfg_.shard_layers, "Llama: inject_kernels does not combine with ZeRO-3 units (shard_layers)");
  for (const auto& module : modules(/*include_self=*/false))
    if (auto* layer = module->as<LlamaDecoderLayerImpl>()) layer->inject_kernels();
  if (cfg_.tensor_parallel.is_member()) return;  // the head's vocabulary split keeps its own forward
  if (!lm_head_.is_empty())
    pack_plain_linear(packed_head_, lm_head_);
  else
    packed_head_.pack(model_->embedding_weight(), {});  // tied: the embedding's rows
}

LlamaKVCache LlamaForCausalLMImpl::make_kv_cache(int64_t batch, int64_t capacity) const {
  DS_CHECK(batch >= 1 && capacity >= 1, "Llama decode: a cache needs batch and capacity >= 1, got ", batch, " and ",
           capacity);
  const int64_t tp = cfg_.tensor_parallel.is_member() ? cfg_.tensor_parallel.size() : 1;
  return LlamaKVCache::empty(cfg_.num_hidden_layers, batch, cfg_.num_key_value_heads / tp, capacity, cfg_.head_dim,
                             model_->embedding_weight().options());
}

at::Tensor LlamaForCausalLMImpl::decode(const at::Tensor& tokens, const at::Tensor& positions, LlamaKVCache& cache) {
  DS_CHECK(!cfg_.shard_layers && !cfg_.sequence_parallel.is_member(),
           "Llama decode: not with ZeRO-3 units (shard_layers) or sequence parallelism; build the model without them");
  at::NoGradGuard no_grad;
  const at::Tensor h = model_->forward_cached(tokens, positions, cache);
  const at::Tensor last = head(h.narrow(1, h.size(1) - 1, 1)).select(1, 0);
  const at::Tensor whole = cfg_.tensor_parallel.is_member() ? tp::gather_from_region(last, cfg_.tensor_parallel) : last;
  return whole.to(at::kFloat);
}

}  // namespace deepspeed::models
