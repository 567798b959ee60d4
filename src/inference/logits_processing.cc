// process_logits, next_tokens and mark_finished (deepspeed/inference/logits_processing.h): transformers'
// RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper, written with the
// same ATen operations in the same order as transformers' Python, so our scores round as theirs do.
#include "deepspeed/inference/logits_processing.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/GeneratorImpl.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>

#include "deepspeed/error.h"

namespace deepspeed::inference {
namespace {

// transformers' filter_value: a filtered token's softmax probability is exactly 0, so no draw can pick it.
constexpr double kFiltered = -std::numeric_limits<double>::infinity();

void check_inputs(const at::Tensor& logits, const at::Tensor& sequences) {
  DS_CHECK(logits.defined() && logits.dim() == 2 && at::isFloatingType(logits.scalar_type()),
           "process_logits: logits must be a floating tensor [batch, vocab], got ",
           logits.defined() ? logits.toString() : std::string("undefined"), " ",
           logits.defined() ? logits.sizes() : at::IntArrayRef{});
  DS_CHECK(sequences.defined() && sequences.dim() == 2 && sequences.scalar_type() == at::kLong,
           "process_logits: sequences must be an int64 tensor [batch, length] of the ids so far, got ",
           sequences.defined() ? sequences.toString() : std::string("undefined"), " ",
           sequences.defined() ? sequences.sizes() : at::IntArrayRef{});
  DS_CHECK(sequences.size(0) == logits.size(0) && sequences.device() == logits.device(), "process_logits: sequences ",
           sequences.sizes(), " on ", sequences.device(), " and logits ", logits.sizes(), " on ", logits.device(),
           " must have the same batch and device");
}

// Ids >= vocab (an embedding larger than the output layer) are clamped onto one extra column, dropped after, so
// they penalize nothing; an id twice in a row is penalized once (scatter writes the same value twice).
at::Tensor apply_repetition_penalty(const at::Tensor& scores, const at::Tensor& sequences, double penalty) {
  const int64_t vocab = scores.size(1);
  const at::Tensor ids = sequences.clamp_max(vocab);
  const at::Tensor padded = at::constant_pad_nd(scores, {0, 1});
  const at::Tensor score = padded.gather(1, ids);
  const at::Tensor penalized = at::where(score < 0, score * penalty, score / penalty);
  return padded.scatter(1, ids, penalized).narrow(1, 0, vocab);
}

// Keeps every score >= the k-th highest (ties at the k-th all stay, as in transformers).
at::Tensor apply_top_k(const at::Tensor& scores, int64_t top_k) {
  const int64_t k = std::min(top_k, scores.size(1));
  const at::Tensor kth = std::get<0>(at::topk(scores, k)).narrow(1, k - 1, 1);
  return scores.masked_fill(scores < kth, kFiltered);
}

// Removes the lowest scores whose cumulative probability, summed from the lowest up, stays <= 1 - top_p; the
// highest score always stays (min_tokens_to_keep 1).
at::Tensor apply_top_p(const at::Tensor& scores, double top_p) {
  const auto [sorted, order] = at::sort(scores, /*dim=*/-1, /*descending=*/false);
  const at::Tensor cumulative = sorted.softmax(-1).cumsum(-1);
  at::Tensor remove_sorted = cumulative <= (1 - top_p);
  remove_sorted.narrow(1, scores.size(1) - 1, 1).fill_(false);
  const at::Tensor remove = remove_sorted.scatter(1, order, remove_sorted);
  return scores.masked_fill(remove, kFiltered);
}

}  // namespace

at::Tensor process_logits(const at::Tensor& logits, const at::Tensor& sequences, const GenerationConfig& cfg) {
  cfg.check("GenerationConfig");
  check_inputs(logits, sequences);
  at::Tensor scores = logits.to(at::kFloat);
  if (cfg.repetition_penalty != 1.0) scores = apply_repetition_penalty(scores, sequences, cfg.repetition_penalty);
  if (!cfg.do_sample) return scores;
  // transformers' _get_logits_processor order: temperature, top-k, top-p, each only when it changes something.
  if (cfg.temperature != 1.0) scores = scores / cfg.temperature;
  if (cfg.top_k != 0) scores = apply_top_k(scores, cfg.top_k);
  if (cfg.top_p < 1.0) scores = apply_top_p(scores, cfg.top_p);
  return scores;
}

at::Tensor next_tokens(const at::Tensor& processed, const GenerationConfig& cfg, at::Generator* generator) {
  DS_CHECK(processed.defined() && processed.dim() == 2 && at::isFloatingType(processed.scalar_type()),
           "next_tokens: scores must be a floating tensor [batch, vocab] from process_logits");
  if (!cfg.do_sample) return processed.argmax(-1);
  std::optional<at::Generator> gen;
  if (generator != nullptr) gen = *generator;
  return at::multinomial(processed.softmax(-1), /*num_samples=*/1, /*replacement=*/false, gen).squeeze(1);
}

at::Generator make_generator(const GenerationConfig& cfg, const c10::Device& device) {
  at::Generator global = at::globalContext().defaultGenerator(device);  // a handle sharing the default's state
  at::Generator own;
  {
    // Cloning reads the default generator's state, which other threads may be advancing.
    std::lock_guard<std::mutex> lock(global.mutex());
    own = global.clone();
  }
  own.set_current_seed(cfg.seed ? *cfg.seed : c10::detail::getNonDeterministicRandom(device.is_cuda()));
  return own;
}

void mark_finished(at::Tensor& next, at::Tensor& finished, const GenerationConfig& cfg) {
  DS_CHECK(next.defined() && next.dim() == 1 && next.scalar_type() == at::kLong,
           "mark_finished: next must be the int64 tokens [batch] of one step");
  DS_CHECK(finished.defined() && finished.sizes() == next.sizes() && finished.scalar_type() == at::kBool &&
               finished.device() == next.device(),
           "mark_finished: finished must be a bool tensor ", next.sizes(), " on ", next.device(), ", got ",
           finished.defined() ? finished.toString() : std::string("undefined"), " ",
           finished.defined() ? finished.sizes() : at::IntArrayRef{});
  if (cfg.eos_token_id.empty()) return;
  next.masked_fill_(finished, cfg.pad_token_id.value_or(cfg.eos_token_id.front()));
  const at::Tensor eos = at::tensor(cfg.eos_token_id, next.options());
  finished.logical_or_(at::isin(next, eos));
}

}  // namespace deepspeed::inference
