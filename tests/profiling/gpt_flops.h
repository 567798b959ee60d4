// The reference GPT's forward cost (models/gpt.h, bias on, tied head, no dropout), counted by hand
// from its config the way the flops profiler counts the ATen operators GPT::forward runs. B =
// batch, T = sequence, C = hidden, H = heads, V = vocab, L = layers.
//
//   per block (L of them)                              MACs              flops beside 2 x MACs
//     ln1, ln2: layer_norm with weight                 -                 5 BTC each
//     qkv: matmul [B,T,C] x [C,3C], bias add_          3 BTC^2           3 BTC
//     scores = q @ k^T: matmul [B,H,T,D] x [B,H,D,T]   B T^2 C           -
//     scores * 1/sqrt(D): mul                          -                 B H T^2
//     masked_fill, ones, triu                          -                 - (no formula)
//     softmax                                          -                 B H T^2
//     att @ v: matmul [B,H,T,T] x [B,H,T,D]            B T^2 C           -
//     proj: matmul [B,T,C] x [C,C], bias add_          BTC^2             BTC
//     residual adds x + attn, h + mlp                  -                 2 BTC
//     fc: matmul [B,T,C] x [C,4C], bias add_           4 BTC^2           4 BTC
//     gelu                                             -                 4 BTC
//     fc_proj: matmul [B,T,4C] x [4C,C], bias add_     4 BTC^2           BTC
//   embeddings: embedding x 2                          -                 - (DeepSpeed: 0)
//   wte(tokens) + wpe(pos): add                        -                 BTC
//   ln_f                                               -                 5 BTC
//   LM head: matmul [B,T,C] x wte.weight^T [C,V]       BTCV              -
//   cross_entropy_loss                                 -                 - (DeepSpeed: 0)
//
// So MACs  = L (12 BTC^2 + 2 B T^2 C) + BTCV
//    flops = 2 MACs + L (25 BTC + 2 B H T^2) + 6 BTC
#pragma once

#include <cstdint>

#include "gpt.h"

namespace gpt_flops {

struct Count {
  int64_t macs = 0;
  int64_t flops = 0;
};

inline Count forward(const deepspeed::models::GPTConfig& c, int64_t batch) {
  const int64_t B = batch, T = c.seq_len, C = c.hidden, H = c.heads, V = c.vocab_size, L = c.layers;
  const int64_t BTC = B * T * C;
  Count n;
  n.macs = L * (12 * BTC * C + 2 * B * T * T * C) + BTC * V;
  n.flops = 2 * n.macs + L * (25 * BTC + 2 * B * H * T * T) + 6 * BTC;
  return n;
}

// Attention's own work, beside its qkv and proj Linears: the two products, the scale and the
// softmax.
inline Count attention_own(const deepspeed::models::GPTConfig& c, int64_t batch) {
  const int64_t B = batch, T = c.seq_len, C = c.hidden, H = c.heads;
  Count n;
  n.macs = 2 * B * T * T * C;
  n.flops = 2 * n.macs + 2 * B * H * T * T;
  return n;
}

// The test configuration: 2 layers, hidden 64, 4 heads, 32 tokens, 256 byte tokens.
inline deepspeed::models::GPTConfig config() {
  deepspeed::models::GPTConfig c;
  c.layers = 2;
  c.hidden = 64;
  c.heads = 4;
  c.seq_len = 32;
  c.vocab_size = 256;
  return c;
}

}  // namespace gpt_flops
