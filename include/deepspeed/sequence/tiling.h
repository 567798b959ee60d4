// Sequence tiling, the memory half of Arctic Long Sequence Training (ALST; DeepSpeed's TiledMLP,
// TiledFusedLogitsLoss and SequenceTiledCompute): a per-token computation over a long sequence runs a tile of
// positions at a time, so that its intermediate activations exist for one tile only, never for the whole sequence.
// An MLP's [seq, intermediate] activations and a language model's [seq, vocab] logits are the largest tensors of a
// long-sequence step; tiled, they are [tile, intermediate] and [tile, vocab].
//
//   // x [batch, seq, hidden]; the MLP's weights listed so that their gradients flow
//   at::Tensor y = deepspeed::sequence::tiled_compute([&](const at::Tensor& t) { return mlp(t); }, x,
//                                                     mlp->parameters(), /*tile_tokens=*/hidden);
//   at::Tensor loss = deepspeed::sequence::tiled_cross_entropy_sum(head, h, labels, {head_weight}, 1024) / count;
//
// Positions are tiled over the flattened [batch * seq] rows, so a tile may span two sequences: fit for per-token
// functions only (an MLP, a head and its loss; not attention). The result and every gradient equal the untiled
// computation's up to the order of additions (tests/sequence/tiling_test.cc).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace deepspeed::sequence {

// A per-token function of a tile of rows [tile, features_in] -> [tile, features_out] (or a loss: see below).
using TileFn = std::function<at::Tensor(const at::Tensor& tile)>;

// fn over x [..., features] in tiles of `tile_tokens` rows of x flattened to [rows, features] (the last tile shorter),
// keeping no tile's intermediate activations: forward runs each tile without a graph and joins the outputs; backward
// reruns each tile with one and back-propagates its rows of the incoming gradient. The gradients of `params` (the
// weights fn uses; those that require grad) are summed over the tiles and handed to autograd once, so hooks on them
// (ZeRO's gradient reduction) fire once per backward, as without tiling. Without grad mode: the tiles, joined.
// std::invalid_argument for tile_tokens < 1.
at::Tensor tiled_compute(const TileFn& fn, const at::Tensor& x, const std::vector<at::Tensor>& params,
                         int64_t tile_tokens);

// The sum over positions of the cross-entropy (fp32) of head(hidden) against `targets` (-100 ignored), in tiles of
// `tile_tokens` rows of hidden [..., features] and targets [...]: never more than one tile's logits. The loss ends
// the graph, so forward computes each tile's loss and its gradients at once (one pass, as DeepSpeed's
// TiledFusedLogitsLoss) and keeps only d(hidden) and the params' summed gradients; backward scales them by the
// incoming gradient. Divide by the count of targets that are not -100 for the mean.
at::Tensor tiled_cross_entropy_sum(const TileFn& head, const at::Tensor& hidden, const at::Tensor& targets,
                                   const std::vector<at::Tensor>& params, int64_t tile_tokens);

}  // namespace deepspeed::sequence
