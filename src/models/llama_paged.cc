// Ragged decoding over a blocked KV cache for the Llama family (deepspeed/models/llama.h: LlamaPagedKVCache,
// forward_paged), the model half of FastGen-style serving (deepspeed/inference/ragged_engine.h). One pass holds
// several sequences' new tokens back to back, without padding: the embedding, the norms, the projections and the MLP
// run over all of them at once (where batching pays), and only attention is split up. Each layer writes the pass's
// keys and values into their cache slots with one index_copy_, then runs scaled_dot_product_attention once per
// prompt chunk (over that sequence's gathered blocks). The single-token decodes attend together: on a CPU through
// deepspeed/ops/paged_attention.h, which reads their keys where they lie; elsewhere by scaled_dot_product_attention
// over their keys gathered into one padded batch. Kept apart from llama_decode.cc, whose cache is one dense tensor
// per row.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "deepspeed/error.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/ops/paged_attention.h"
#include "deepspeed/tp/parallel_linear.h"

namespace deepspeed::models {

// One scaled_dot_product_attention call of a pass: `count` sequences of `length` new tokens each (a prompt chunk:
// one sequence; decodes: one token of each of many).
struct PagedAttentionGroup {
  at::Tensor rows;  // [count * length] the queries' indices among the pass's T tokens
  int64_t count = 0, length = 0;
  at::Tensor slots;  // [count, keys] the cache slots each sequence reads (padding repeats a slot, masked out)
  at::Tensor mask;   // [count, 1, length, keys] bool, or undefined: all keys, causally when `causal`
  bool causal = false;
};

struct PagedAttentionPlan {
  at::Tensor write_slots;  // [T] where each new token's key and value go
  std::vector<PagedAttentionGroup> groups;
  std::vector<ops::PagedDecodeSequence> decodes;  // on a CPU: the decodes, for ops::paged_decode_attention
};

namespace {

int64_t paged_slot(const PagedSequence& s, int64_t position, int64_t block_size) {
  return s.blocks[static_cast<size_t>(position / block_size)] * block_size + position % block_size;
}

// The checks a plan's arithmetic relies on: every length positive, every block table long enough and in range.
void check_paged_sequences(const std::vector<PagedSequence>& sequences, int64_t tokens, const LlamaPagedKVCache& c) {
  DS_CHECK(!sequences.empty(), "Llama forward_paged: no sequences");
  int64_t total = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const PagedSequence& s = sequences[i];
    DS_CHECK(s.start >= 0 && s.length >= 1, "Llama forward_paged: sequence ", i, " has start ", s.start, " and length ",
             s.length, " (need start >= 0, length >= 1)");
    const int64_t need = (s.start + s.length + c.block_size - 1) / c.block_size;
    DS_CHECK(static_cast<int64_t>(s.blocks.size()) >= need, "Llama forward_paged: sequence ", i, " runs to position ",
             s.start + s.length, " but its block table holds ", s.blocks.size(), " blocks of ", c.block_size);
    for (const int64_t b : s.blocks)
      DS_CHECK(b >= 0 && b < c.num_blocks(), "Llama forward_paged: sequence ", i, " names block ", b, " of a cache of ",
               c.num_blocks());
    total += s.length;
  }
  DS_CHECK(total == tokens, "Llama forward_paged: the sequences' lengths add up to ", total, " but tokens holds ",
           tokens);
}

// The decodes (one new token after at least one cached) as one group: each sequence's keys padded to the longest.
PagedAttentionGroup paged_decode_group(const std::vector<PagedSequence>& sequences, const std::vector<int64_t>& rows,
                                       const std::vector<size_t>& which, int64_t block_size,
                                       const at::TensorOptions& longs) {
  PagedAttentionGroup g;
  g.count = static_cast<int64_t>(which.size());
  g.length = 1;
  int64_t longest = 0;
  for (const size_t i : which) longest = std::max(longest, sequences[i].start + 1);
  at::Tensor slots = at::empty({g.count, longest}, at::kLong);
  at::Tensor seen = at::empty({g.count, longest}, at::kBool);
  int64_t* slot = slots.data_ptr<int64_t>();
  bool* visible = seen.data_ptr<bool>();
  bool ragged = false;
  for (int64_t r = 0; r < g.count; ++r) {
    const PagedSequence& s = sequences[which[static_cast<size_t>(r)]];
    const int64_t keys = s.start + 1;
    for (int64_t p = 0; p < longest; ++p) {
      slot[r * longest + p] = paged_slot(s, std::min(p, keys - 1), block_size);
      visible[r * longest + p] = p < keys;
    }
    ragged = ragged || keys != longest;
  }
  g.rows = at::tensor(rows, at::kLong).to(longs.device());
  g.slots = slots.to(longs.device());
  if (ragged) g.mask = seen.view({g.count, 1, 1, longest}).to(longs.device());
  return g;
}

// A prompt chunk: `s.length` tokens from `s.start` see the keys up to themselves. scaled_dot_product_attention's
// causal mask is aligned top-left, right only for a chunk from position 0; a later chunk takes an explicit mask.
PagedAttentionGroup paged_chunk_group(const PagedSequence& s, int64_t first_row, int64_t block_size,
                                      const at::TensorOptions& longs) {
  PagedAttentionGroup g;
  g.count = 1;
  g.length = s.length;
  const int64_t keys = s.start + s.length;
  std::vector<int64_t> slots(static_cast<size_t>(keys));
  for (int64_t p = 0; p < keys; ++p) slots[static_cast<size_t>(p)] = paged_slot(s, p, block_size);
  g.rows = at::arange(first_row, first_row + s.length, longs);
  g.slots = at::tensor(slots, at::kLong).to(longs.device()).view({1, keys});
  if (s.start == 0) {
    g.causal = true;
  } else {
    const at::Tensor key = at::arange(keys, longs).view({1, keys});
    const at::Tensor query = at::arange(s.start, keys, longs).view({s.length, 1});
    g.mask = key.le(query).view({1, 1, s.length, keys});
  }
  return g;
}

// `in_place_decodes`: the decodes go to ops::paged_decode_attention (the block tables are the sequences' own:
// `sequences` outlives the plan) instead of one gathered group.
PagedAttentionPlan make_paged_plan(const std::vector<PagedSequence>& sequences, int64_t block_size,
                                   const c10::Device& device, bool in_place_decodes) {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  PagedAttentionPlan plan;
  std::vector<int64_t> write, decode_rows;
  std::vector<size_t> decoders;
  int64_t row = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const PagedSequence& s = sequences[i];
    for (int64_t p = s.start; p < s.start + s.length; ++p) write.push_back(paged_slot(s, p, block_size));
    if (s.length == 1 && s.start > 0 && in_place_decodes) {
      plan.decodes.push_back({row, s.start + 1, s.blocks.data()});
    } else if (s.length == 1 && s.start > 0) {
      decoders.push_back(i);
      decode_rows.push_back(row);
    } else {
      plan.groups.push_back(paged_chunk_group(s, row, block_size, longs));
    }
    row += s.length;
  }
  if (!decoders.empty()) plan.groups.push_back(paged_decode_group(sequences, decode_rows, decoders, block_size, longs));
  plan.write_slots = at::tensor(write, at::kLong).to(device);
  return plan;
}

}  // namespace

LlamaPagedKVCache LlamaForCausalLMImpl::make_paged_kv_cache(int64_t num_blocks, int64_t block_size) const {
  DS_CHECK(num_blocks >= 1 && block_size >= 1, "Llama paged cache: needs num_blocks and block_size >= 1, got ",
           num_blocks, " and ", block_size);
  const int64_t tp = cfg_.tensor_parallel.is_member() ? cfg_.tensor_parallel.size() : 1;
  const at::TensorOptions options = model_->embedding_weight().options();
  LlamaPagedKVCache cache;
  cache.block_size = block_size;
  // Uninitialised: a slot is written before any query reads it (reads go only to a sequence's own positions), and
  // a large cache's pages are then touched only as they fill.
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    cache.keys.push_back(at::empty({num_blocks, block_size, cfg_.num_key_value_heads / tp, cfg_.head_dim}, options));
    cache.values.push_back(at::empty({num_blocks, block_size, cfg_.num_key_value_heads / tp, cfg_.head_dim}, options));
  }
  return cache;
}

int64_t LlamaForCausalLMImpl::paged_kv_block_bytes(int64_t block_size) const {
  const int64_t tp = cfg_.tensor_parallel.is_member() ? cfg_.tensor_parallel.size() : 1;
  const int64_t element = static_cast<int64_t>(c10::elementSize(model_->embedding_weight().scalar_type()));
  return 2 * cfg_.num_hidden_layers * block_size * (cfg_.num_key_value_heads / tp) * cfg_.head_dim * element;
}

at::Tensor LlamaAttentionImpl::forward_paged(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                             const PagedAttentionPlan& plan, at::Tensor& keys, at::Tensor& values) {
  const int64_t t = x.size(1);
  auto [q, k, v] = project(x, cos, sin);  // q [1, heads, T, dim], k [1, kv heads, T, dim], v [1, T, kv heads, dim]
  const int64_t slots = keys.size(0) * keys.size(1);
  at::Tensor flat_keys = keys.view({slots, kv_heads_, head_dim_});
  at::Tensor flat_values = values.view({slots, kv_heads_, head_dim_});
  flat_keys.index_copy_(0, plan.write_slots, k.select(0, 0).transpose(0, 1));
  flat_values.index_copy_(0, plan.write_slots, v.select(0, 0));
  const at::Tensor queries = q.select(0, 0);  // [heads, T, dim]
  at::Tensor out = at::empty_like(queries);
  for (const PagedAttentionGroup& g : plan.groups) {
    // [count, heads, length, dim] against [count, kv heads, keys, dim].
    const at::Tensor qg =
        queries.index_select(1, g.rows).view({heads_, g.count, g.length, head_dim_}).permute({1, 0, 2, 3});
    const int64_t n = g.slots.size(1);
    const at::Tensor flat = g.slots.reshape({-1});
    const at::Tensor kg = flat_keys.index_select(0, flat).view({g.count, n, kv_heads_, head_dim_}).transpose(1, 2);
    const at::Tensor vg = flat_values.index_select(0, flat).view({g.count, n, kv_heads_, head_dim_}).transpose(1, 2);
    const at::Tensor og = at::scaled_dot_product_attention(
        qg, kg, vg, g.mask.defined() ? std::optional<at::Tensor>(g.mask) : std::nullopt, /*dropout_p=*/0.0, g.causal,
        /*scale=*/std::nullopt, /*enable_gqa=*/kv_heads_ != heads_);
    out.index_copy_(1, g.rows, og.permute({1, 0, 2, 3}).reshape({heads_, g.count * g.length, head_dim_}));
  }
  if (!plan.decodes.empty())  // scaled_dot_product_attention's default scale
    ops::paged_decode_attention(queries, keys, values, plan.decodes, 1.0 / std::sqrt(static_cast<double>(head_dim_)),
                                out);
  return output_projection(out.transpose(0, 1).reshape({1, t, heads_ * head_dim_}));
}

at::Tensor LlamaDecoderLayerImpl::forward_paged(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                                const PagedAttentionPlan& plan, at::Tensor& keys, at::Tensor& values) {
  const at::Tensor h = x + self_attn_->forward_paged(input_layernorm_->forward(x), cos, sin, plan, keys, values);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

at::Tensor LlamaModelImpl::forward_paged(const at::Tensor& tokens, const std::vector<PagedSequence>& sequences,
                                         LlamaPagedKVCache& cache) {
  DS_CHECK(tokens.dim() == 1 && tokens.scalar_type() == at::kLong,
           "Llama forward_paged: tokens must be int64 [T], got ", tokens.sizes());
  DS_CHECK(static_cast<int64_t>(cache.keys.size()) == static_cast<int64_t>(layers_->size()) && cache.block_size >= 1,
           "Llama forward_paged: the cache was not made by this model (make_paged_kv_cache)");
  check_paged_sequences(sequences, tokens.size(0), cache);
  std::vector<int64_t> positions;
  for (const PagedSequence& s : sequences) {
    cfg_.check_sequence(s.start + s.length);
    for (int64_t p = s.start; p < s.start + s.length; ++p) positions.push_back(p);
  }
  const PagedAttentionPlan plan = make_paged_plan(sequences, cache.block_size, tokens.device(),
                                                  ops::paged_decode_attention_supports(cache.keys.front()));
  at::Tensor h = embed(tokens.unsqueeze(0));  // [1, T, hidden]
  auto [cos, sin] = rope_cos_sin(inv_freq_.to(tokens.device()), at::tensor(positions, at::kLong).to(tokens.device()));
  cos = cos.to(h.scalar_type());
  sin = sin.to(h.scalar_type());
  for (size_t i = 0; i < layers_->size(); ++i)
    h = layers_->ptr(i)->as<LlamaDecoderLayerImpl>()->forward_paged(h, cos, sin, plan, cache.keys[i], cache.values[i]);
  return norm_->forward(h);
}

at::Tensor LlamaForCausalLMImpl::forward_paged(const at::Tensor& tokens, const std::vector<PagedSequence>& sequences,
                                               LlamaPagedKVCache& cache) {
  DS_CHECK(!cfg_.shard_layers && !cfg_.sequence_parallel.is_member(),
           "Llama forward_paged: not with ZeRO-3 units (shard_layers) or sequence parallelism; build the model without "
           "them");
  at::NoGradGuard no_grad;
  const at::Tensor h = model_->forward_paged(tokens, sequences, cache);
  std::vector<int64_t> rows;
  int64_t row = 0;
  for (const PagedSequence& s : sequences) {
    row += s.length;
    if (s.wants_logits) rows.push_back(row - 1);
  }
  if (rows.empty()) return at::empty({0, cfg_.vocab_size}, h.options().dtype(at::kFloat));
  const at::Tensor last = head(h.select(0, 0).index_select(0, at::tensor(rows, at::kLong).to(h.device())));
  const at::Tensor whole = cfg_.tensor_parallel.is_member() ? tp::gather_from_region(last, cfg_.tensor_parallel) : last;
  return whole.to(at::kFloat);
}

}  // namespace deepspeed::models
