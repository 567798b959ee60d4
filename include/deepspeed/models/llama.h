// The Llama family of decoders as Hugging Face transformers defines them, built from a model folder's config.json:
// LlamaForCausalLM (Llama 2, 3, 3.x), MistralForCausalLM, Qwen2ForCausalLM (Qwen2, Qwen2.5) and Qwen3ForCausalLM.
// Parameter names are transformers' own ("model.layers.0.self_attn.q_proj.weight", ...), so a folder's safetensors
// load by name (deepspeed/models/hf_checkpoint.h) and a saved folder loads back into transformers.
//
//   auto cfg = deepspeed::models::LlamaConfig::from_file("Llama-3.2-1B/config.json");
//   deepspeed::models::LlamaForCausalLM model(cfg);
//   deepspeed::models::load_hf_weights(*model, "Llama-3.2-1B");
//   auto engine = deepspeed::initialize(model.ptr(), ds_config);
//   at::Tensor loss = model->forward(tokens, targets);   // targets: the next tokens, -100 ignored
//
// The arithmetic follows transformers': RMSNorm in fp32 then cast back before the weight scales it; rotary
// embeddings in the rotate-half layout with cos/sin computed in fp32 (rope_theta, linear or llama3 scaling); grouped-
// query attention through at::scaled_dot_product_attention (causal, so a GPU takes the flash or memory-efficient
// kernel); the SwiGLU MLP; Qwen2's q/k/v biases, Qwen3's per-head q/k RMSNorm; tied or untied embeddings. What a
// config asks for that is not built here (another architecture, rope scaling type or activation, attention dropout,
// a sliding window shorter than the sequence) is refused by key and value.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/ops/packed_linear.h"
#include "deepspeed/sequence/layer.h"
#include "deepspeed/zero.h"

namespace deepspeed::models {

struct RopeScaling {
  std::string type = "default";  // "default", "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct LlamaConfig {
  std::string architecture;  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // grouped-query attention: heads share key/value heads in groups
  int64_t head_dim = 0;             // the config's head_dim, else hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // biases on q/k/v (Qwen2 always; Llama and Qwen3 with attention_bias)
  bool o_bias = false;    // a bias on o_proj (Llama and Qwen3 with attention_bias)
  bool mlp_bias = false;  // Llama's mlp_bias
  bool qk_norm = false;   // Qwen3: RMSNorm over each head's q and k before the rotation
  bool tie_word_embeddings = false;
  std::optional<int64_t> sliding_window;  // Mistral: sequences longer than this are refused
  double initializer_range = 0.02;        // random initialisation (a config without weights)
  at::ScalarType dtype = at::kFloat;      // the config's dtype / torch_dtype: what the weights were saved in
  std::string json;  // config.json's text as read, written back beside saved weights (dtype updated)

  // How this process builds the model (not read from config.json):
  // ZeRO stage 3: each decoder layer is a unit (deepspeed::zero::shard), and with untied embeddings the embedding and
  // the head are units too; inside a zero::Init scope each is partitioned as soon as it is built, and
  // load_hf_weights then fills only this rank's partitions. A pass-through at stages 0-2.
  bool shard_layers = false;
  // Activation checkpointing per decoder layer (transformers' gradient_checkpointing_enable()): each layer keeps only
  // its input and reruns in backward (deepspeed::checkpointing::checkpoint, so the config's activation_checkpointing
  // section applies: cpu_checkpointing, ...). Only while training with gradients on.
  bool gradient_checkpointing = false;
  // Sequence tiling, ALST's memory half (deepspeed/sequence/tiling.h; ArcticTraining's tiled_mlp_compute): each MLP
  // runs `tiled_mlp_tokens` positions at a time (DeepSpeed's TiledMLP takes hidden_size) and the loss
  // `tiled_loss_tokens` at a time, so no [seq, intermediate] activation or [seq, vocab] logits tensor exists beyond
  // one tile's. 0: untiled. The loss and every gradient are the untiled ones up to the order of sums. Not with
  // tensor_parallel; the tiled loss not with an untied head under shard_layers (its head is a ZeRO-3 unit of its own).
  int64_t tiled_mlp_tokens = 0;
  int64_t tiled_loss_tokens = 0;
  // Tensor parallelism (Megatron's layout) over this group when set: q/k/v and the MLP's gate/up column-parallel
  // (heads, key/value heads and intermediate width split over the group), o_proj and down_proj row-parallel, the
  // embedding and an untied head vocabulary-parallel, the loss the vocabulary-parallel cross-entropy. Each layer is
  // built and initialised whole, then split, and load_hf_weights fills each rank's slices. Needs
  // num_attention_heads, num_key_value_heads, intermediate_size and vocab_size divisible by the group's size; not
  // with shard_layers. Build over deepspeed::tp::tensor_parallel_groups(T).tensor_parallel and train with
  // tensor_parallel.autotp_size T.
  deepspeed::comm::ProcessGroup tensor_parallel;
  // Ulysses sequence parallelism over this group when set: forward takes this rank's part of each sequence (P equal
  // consecutive parts in group-rank order, rotary positions counted from the part's first token) and the attention
  // exchanges it for whole sequences of heads / P query heads and num_key_value_heads / P key/value heads
  // (deepspeed::sequence::DistributedAttention; with fewer key/value heads than P, each is repeated P /
  // num_key_value_heads times so every rank gets the one its query heads share, as DeepSpeed's UlyssesSPAttentionHF
  // does); the loss is the mean over the whole sequences' counted positions, the same on every rank of the group
  // (deepspeed/sequence/loss.h: an SFT response in one rank's part weighs as without the split). Needs
  // num_attention_heads divisible by P and
  // num_key_value_heads divisible by or dividing P (refused by key otherwise); not with tensor_parallel. Build over
  // deepspeed::sequence::sequence_parallel_groups(P).sequence_parallel and train with sequence_parallel_size P.
  deepspeed::comm::ProcessGroup sequence_parallel;

  // Reads an HF config.json; ConfigError naming the file, the key and the value for what is refused.
  static LlamaConfig from_file(const std::string& path);
  // The same from the file's text; `where` names it in errors.
  static LlamaConfig from_json(const std::string& text, const std::string& where = "config.json");
  int64_t kv_groups() const { return num_attention_heads / num_key_value_heads; }
  // ConfigError naming sliding_window when a sequence of `tokens` is longer than the window (sliding-window
  // attention is not built).
  void check_sequence(int64_t tokens) const;
  // Parameters the model has (a tied head counted once).
  int64_t num_parameters() const;
};

// Keys and values of the positions a model has already run, for decoding a token at a time (transformers'
// past_key_values; deepspeed/inference/generate.h drives it): per decoder layer [batch, this rank's key/value heads,
// capacity, head_dim], preallocated once; positions [0, length) hold values. `valid` [batch, capacity] bool is false
// at a left-padded prompt's padding, which no position attends to; the caller marks each position before running it.
struct LlamaKVCache {
  std::vector<at::Tensor> keys, values;
  at::Tensor valid;
  int64_t length = 0;
  // Whether any position is padding (false: every position of every row is valid, so attention needs no mask beyond
  // causality, and scaled_dot_product_attention takes its causal path). Set by whoever marks `valid`.
  bool padded = true;
  int64_t capacity() const { return valid.defined() ? valid.size(1) : 0; }
  // An empty cache: `layers` zeroed key and value tensors [batch, heads, capacity, head_dim] with `options`.
  static LlamaKVCache empty(int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim,
                            const at::TensorOptions& options);
};

// The attention mask of `seq` new positions run after the cache's `length`: [batch, 1, seq, length + seq] bool
// (a position sees the valid positions up to itself, and always itself), or undefined when causality alone says it
// (nothing padded, and a prefill from position 0 or a single new position). Any model's cached decode may use it.
at::Tensor kv_cache_mask(const LlamaKVCache& cache, int64_t seq);

// A blocked (paged) KV cache for serving many sequences at once (deepspeed/inference/ragged_engine.h drives it): per
// decoder layer, keys and values [num_blocks, block_size, this rank's key/value heads, head_dim], so one block's
// positions are contiguous and a flat [num_blocks * block_size, heads, head_dim] view takes a pass's new keys in one
// index_copy_. A sequence's block table lists its blocks: position p lives in table[p / block_size], row
// p % block_size. Which blocks are free is the caller's business (the serving engine keeps a free list).
struct LlamaPagedKVCache {
  std::vector<at::Tensor> keys, values;
  int64_t block_size = 0;
  int64_t num_blocks() const { return keys.empty() ? 0 : keys.front().size(0); }
};

// One sequence's part of a ragged pass (LlamaForCausalLMImpl::forward_paged).
struct PagedSequence {
  int64_t start = 0;            // its positions already in the cache: the new tokens run at start, start + 1, ...
  int64_t length = 0;           // its new tokens, consecutive in the pass's flat tokens
  std::vector<int64_t> blocks;  // its block table, covering at least start + length positions
  bool wants_logits = true;     // whether the pass returns the logits of its last new token
};

// forward_paged's layout of one pass (the slots written, the keys each sequence reads, its mask), built once per pass
// and shared by the layers (src/models/llama_paged.cc).
struct PagedAttentionPlan;

// x * rsqrt(mean(x^2) + eps) in fp32, cast back to x's dtype, times the weight.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  // `partial_over`: a norm over each head's features (Qwen3's q/k norms) under tensor parallelism sees only this
  // rank's heads, so its weight's gradient is summed over that group (the weight stays whole on every rank).
  LlamaRMSNormImpl(int64_t dim, double eps, deepspeed::comm::ProcessGroup partial_over = {});
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;

 private:
  double eps_;
  deepspeed::comm::ProcessGroup partial_over_;
};
TORCH_MODULE(LlamaRMSNorm);

// Rotary position embedding's inverse frequencies for the config (rope_theta, with linear or llama3 scaling), fp32
// [head_dim / 2]; and cos, sin [seq, head_dim] in fp32 for positions 0..seq-1.
at::Tensor rope_inverse_frequencies(const LlamaConfig& cfg);
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& positions);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaConfig& cfg);
  // x [batch, seq, hidden]; cos, sin [seq, head_dim] in x's dtype.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // Incremental decoding: x's keys and values written to keys / values [batch, kv heads, capacity, head_dim] at
  // positions [start, start + seq), then x attends to positions [0, start + seq) where `mask` [batch, 1, seq,
  // start + seq] (bool) allows; an undefined mask: all of them, causally. cos, sin [batch, 1, seq, head_dim].
  at::Tensor forward_cached(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask,
                            at::Tensor& keys, at::Tensor& values, int64_t start);
  // Ragged decoding over a blocked cache: x [1, T, hidden] holds several sequences' new tokens; their keys and values
  // go to the plan's slots of keys / values [num_blocks, block_size, kv heads, head_dim], then each sequence attends
  // to its own positions. cos, sin [T, head_dim].
  at::Tensor forward_paged(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                           const PagedAttentionPlan& plan, at::Tensor& keys, at::Tensor& values);
  // q, k and v as one matmul, packed on a CPU with o_proj (LlamaForCausalLMImpl::inject_kernels).
  void inject_kernels();

 private:
  at::Tensor fused_qkv_weight_, fused_qkv_bias_;  // q, k, v stacked; the projections' parameters are views of them
  deepspeed::ops::PackedLinear packed_qkv_, packed_o_;  // inject_kernels on a CPU; used without gradients
  at::Tensor output_projection(const at::Tensor& x);    // o_proj, packed when it can be
  // q [batch, heads, seq, dim] and k [batch, kv heads, seq, dim] rotated; v [batch, seq, kv heads, dim].
  std::tuple<at::Tensor, at::Tensor, at::Tensor> project(const at::Tensor& x, const at::Tensor& cos,
                                                         const at::Tensor& sin);

  int64_t heads_, kv_heads_, head_dim_;  // this rank's heads under tensor parallelism
  int64_t kv_replicas_ = 1;              // Ulysses with fewer key/value heads than ranks: copies of each
  // torch::nn::Linear, or its column-/row-parallel split (LlamaConfig::tensor_parallel).
  torch::nn::AnyModule q_proj_, k_proj_, v_proj_, o_proj_;
  LlamaRMSNorm q_norm_{nullptr}, k_norm_{nullptr};  // Qwen3
  deepspeed::sequence::DistributedAttention ulysses_{nullptr};  // LlamaConfig::sequence_parallel
};
TORCH_MODULE(LlamaAttention);

// down(silu(gate(x)) * up(x)).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& cfg);
  at::Tensor forward(const at::Tensor& x);
  // gate and up as one matmul, packed on a CPU with down (LlamaForCausalLMImpl::inject_kernels).
  void inject_kernels();

 private:
  at::Tensor untiled(const at::Tensor& x);
  at::Tensor fused_gate_up_weight_, fused_gate_up_bias_;  // gate, up stacked; their parameters are views of them
  deepspeed::ops::PackedLinear packed_gate_up_, packed_down_;  // inject_kernels on a CPU; used without gradients
  int64_t tile_ = 0;  // LlamaConfig::tiled_mlp_tokens
  torch::nn::AnyModule gate_proj_, up_proj_, down_proj_;
};
TORCH_MODULE(LlamaMLP);

// x + attn(input_layernorm(x)), then x + mlp(post_attention_layernorm(x)).
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaConfig& cfg);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  void inject_kernels();
  // LlamaAttentionImpl::forward_cached's arguments.
  at::Tensor forward_cached(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask,
                            at::Tensor& keys, at::Tensor& values, int64_t start);
  // LlamaAttentionImpl::forward_paged's arguments.
  at::Tensor forward_paged(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                           const PagedAttentionPlan& plan, at::Tensor& keys, at::Tensor& values);

 private:
  LlamaRMSNorm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr};
  LlamaAttention self_attn_{nullptr};
  LlamaMLP mlp_{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);
using ShardedLlamaDecoderLayer = deepspeed::zero::ShardedImpl<LlamaDecoderLayerImpl>;

// transformers' "model": the token embedding, the decoder layers and the final norm.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaConfig& cfg);
  // The final hidden states [batch, seq, hidden] of tokens [batch, seq] at positions 0..seq-1.
  at::Tensor forward(const at::Tensor& tokens);
  // The token embedding's weight (this rank's vocabulary rows under tensor parallelism): the tied head's too.
  const at::Tensor& embedding_weight() const;
  // The final hidden states of tokens [batch, seq] at rotary `positions` [batch, seq], run after the cache's
  // `length` positions; appends their keys and values and advances `length` (LlamaForCausalLMImpl::decode).
  at::Tensor forward_cached(const at::Tensor& tokens, const at::Tensor& positions, LlamaKVCache& cache);
  // The final hidden states [1, T, hidden] of a ragged pass (LlamaForCausalLMImpl::forward_paged).
  at::Tensor forward_paged(const at::Tensor& tokens, const std::vector<PagedSequence>& sequences,
                           LlamaPagedKVCache& cache);

 private:
  at::Tensor embed(const at::Tensor& tokens);
  LlamaConfig cfg_;
  torch::nn::AnyModule embed_tokens_;  // Embedding, or VocabParallelEmbedding (tensor parallelism)
  std::shared_ptr<deepspeed::zero::ShardedImpl<torch::nn::EmbeddingImpl>> embed_unit_;  // shard_layers, untied
  torch::nn::ModuleList layers_;
  LlamaRMSNorm norm_{nullptr};
  at::Tensor inv_freq_;  // not a parameter or buffer: transformers does not save it either
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  // Random weights as transformers initialises them (normal(0, initializer_range), zero biases, unit norms);
  // load_hf_weights replaces them.
  explicit LlamaForCausalLMImpl(const LlamaConfig& cfg);
  // Mean cross-entropy of the logits of `tokens` [batch, seq] against `targets` [batch, seq] (the next token at each
  // position; -100 is ignored, as transformers' labels).
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& targets);
  // Logits [batch, seq, vocab] in the model's dtype.
  at::Tensor logits(const at::Tensor& tokens);
  const LlamaConfig& config() const { return cfg_; }

  // Incremental decoding. An empty cache for `batch` sequences of up to `capacity` positions, in the model's dtype
  // and on its device (this rank's key/value heads under tensor parallelism).
  LlamaKVCache make_kv_cache(int64_t batch, int64_t capacity) const;
  // Runs tokens [batch, seq] at rotary `positions` [batch, seq] after the cache's positions (cache.valid must already
  // mark the new ones), appends their keys and values, and returns the last position's logits [batch, vocab] in fp32
  // (the whole vocabulary under tensor parallelism). No gradients. Not with shard_layers or sequence parallelism.
  at::Tensor decode(const at::Tensor& tokens, const at::Tensor& positions, LlamaKVCache& cache);
  // Ragged decoding (src/models/llama_paged.cc). An uninitialised blocked cache of `num_blocks` blocks of
  // `block_size` positions in the model's dtype and on its device (this rank's key/value heads), and the bytes one
  // block takes over all layers (keys and values), to size a cache from a memory budget.
  LlamaPagedKVCache make_paged_kv_cache(int64_t num_blocks, int64_t block_size) const;
  int64_t paged_kv_block_bytes(int64_t block_size) const;
  // One forward pass over several sequences at once: tokens [T] int64 are their new tokens one after another (each
  // sequence's `length` of them, in `sequences` order), run at positions start, start + 1, ... of that sequence; their
  // keys and values are written to the sequence's blocks, and each attends causally to its own positions only. The
  // linear layers run over all T tokens together. Returns the last new token's logits [n, vocab] in fp32 of the n
  // sequences with wants_logits, in order (the whole vocabulary under tensor parallelism, every rank alike). No
  // gradients. Not with shard_layers or sequence parallelism.
  at::Tensor forward_paged(const at::Tensor& tokens, const std::vector<PagedSequence>& sequences,
                           LlamaPagedKVCache& cache);
  // Inference's kernels (init_inference's replace_with_kernel_inject): each layer's q, k and v projections, and its
  // MLP's gate and up, become one matmul each. Their weights move into one tensor per group, the parameters becoming
  // views of it (no extra memory; a saved model is unchanged). On a CPU (float or bfloat16), every linear layer not
  // split by tensor parallelism, the head included, also keeps its weight packed for oneDNN when it has 65,536
  // elements or more (deepspeed/ops/packed_linear.h: 1.1-2.9x faster matmuls, one more copy of those weights in
  // memory; DS_PACKED_LINEAR=0 turns it off). Forward without gradients takes the fused and packed matmuls; with
  // gradients, the separate ones (training stays exact). Call after any dtype or device change; not with shard_layers.
  void inject_kernels();

 private:
  LlamaConfig cfg_;
  LlamaModel model_{nullptr};
  // The head on hidden states [..., hidden]: this rank's logits (its vocabulary slice under tensor parallelism).
  at::Tensor head(const at::Tensor& h);
  // This rank's logits: [batch, seq, vocab], or its slice of the vocabulary under tensor parallelism.
  at::Tensor local_logits(const at::Tensor& tokens);
  at::Tensor tiled_loss(const at::Tensor& tokens, const at::Tensor& targets);
  torch::nn::AnyModule lm_head_;  // untied: Linear, or ColumnParallelLinear over the vocabulary
  deepspeed::ops::PackedLinear packed_head_;  // inject_kernels on a CPU, without tensor parallelism
  std::shared_ptr<deepspeed::zero::ShardedImpl<torch::nn::LinearImpl>> lm_head_unit_;  // shard_layers, untied
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace deepspeed::models
