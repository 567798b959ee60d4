// One decoding step's token choice, as transformers' `generate` makes it (greedy search and sampling): the scores
// of the last position processed (repetition penalty; then, when sampling, temperature, top-k and top-p in the
// order transformers' _get_logits_processor builds them), the next token drawn or taken as the argmax, and the rows
// that hit a stop token marked finished. Each step of a generate loop calls, in this order:
//
//   at::Tensor scores = process_logits(logits.select(1, -1), sequences, cfg);  // [batch, vocab] fp32
//   at::Tensor next = next_tokens(scores, cfg, &generator);                     // [batch] int64
//   mark_finished(next, finished, cfg);                                          // pad for finished rows
//   sequences = at::cat({sequences, next.unsqueeze(1)}, 1);
//
// Free functions over tensors of any device; they keep no state, so one config may serve several threads. The
// generator is the caller's and is not locked here: share one across threads only under the caller's lock.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "deepspeed/inference/generation_config.h"

namespace deepspeed::inference {

// `logits` [batch, vocab] of any floating dtype, `sequences` [batch, len] int64: each row's ids so far (prompt and
// generated; ids >= vocab are ignored, as transformers does). Returns fp32 scores [batch, vocab] (`logits` itself
// when it is fp32 and no setting changes it; never written in place): the repetition penalty on every id present in the
// row; then, only when cfg.do_sample, logits / temperature (when not 1), all but the top_k highest set to -inf (when
// top_k > 0), and transformers' top-p cut (when top_p < 1): scores sorted ascending, the smallest whose cumulative
// softmax is <= 1 - top_p set to -inf, the highest always kept. Throws deepspeed::Error for wrong shapes or dtypes,
// ConfigError for out-of-range settings (GenerationConfig::check).
at::Tensor process_logits(const at::Tensor& logits, const at::Tensor& sequences, const GenerationConfig& cfg);

// The next token of each row [batch] int64 from process_logits' scores: the argmax when !cfg.do_sample, else one
// draw from softmax(processed) using `generator` (nullptr: LibTorch's default generator of the device). The same
// generator state gives the same tokens run to run; the draws are not PyTorch's `torch.multinomial` stream.
at::Tensor next_tokens(const at::Tensor& processed, const GenerationConfig& cfg, at::Generator* generator);

// A generator for `device`'s kind, its own state (not the default generator's) seeded with cfg.seed, or with a
// nondeterministic seed when cfg.seed is unset: the generator a generate call hands next_tokens.
at::Generator make_generator(const GenerationConfig& cfg, const c10::Device& device);

// transformers' stop handling for one step, in place. `next` [batch] int64 are the tokens just chosen, `finished`
// [batch] bool the rows that had already stopped. Rows already finished get pad_token_id (eos_token_id[0] when
// unset) in `next`; then every row whose token is any eos_token_id becomes finished. Without eos_token_id nothing
// changes: rows run to the token limit. Throws deepspeed::Error for wrong shapes or dtypes.
void mark_finished(at::Tensor& next, at::Tensor& finished, const GenerationConfig& cfg);

}  // namespace deepspeed::inference
