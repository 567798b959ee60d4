// The decoding settings of one generate call, read from a Hugging Face `generation_config.json` (the file
// transformers' GenerationConfig.save_pretrained writes next to a model) with transformers' key names, defaults and
// checks, so a model folder decodes here as it does under transformers' `generate`.
//
// Only greedy search and multinomial sampling (temperature, top-k, top-p, repetition penalty, stop tokens) are
// implemented. A key that would make transformers decode differently (num_beams 4, min_p, no_repeat_ngram_size 3,
// ...) is refused by name with a ConfigError rather than ignored, since ignoring it would silently produce other
// text. Informational keys (bos_token_id, transformers_version, use_cache, ...) and keys transformers does not know
// are ignored, as transformers ignores them.
//
// A plain value type: no locking, copy it freely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::inference {

struct GenerationConfig {
  // How many tokens generate may add to each prompt. See new_token_limit() for the file's max_length.
  int64_t max_new_tokens = 20;
  // false: greedy (argmax); true: a draw from the processed distribution, after temperature, top_k and top_p.
  bool do_sample = false;
  double temperature = 1.0;  // used when do_sample; must then be > 0
  int64_t top_k = 50;        // used when do_sample; 0 disables it
  double top_p = 1.0;        // used when do_sample; in (0, 1], 1 disables it
  // Applied in greedy and sampling alike to every id already in the row (prompt and generated): a score s becomes
  // s * penalty when s < 0, s / penalty otherwise (transformers' RepetitionPenaltyLogitsProcessor). 1 disables it.
  double repetition_penalty = 1.0;
  // A row is finished once it emits any of these; none: rows run to the token limit.
  std::vector<int64_t> eos_token_id;
  // What a finished row emits while others continue; unset: eos_token_id[0] (as transformers' generate does).
  std::optional<int64_t> pad_token_id;
  // The sampler's seed; unset: a nondeterministic one. Not a transformers key: tools and callers set it.
  std::optional<uint64_t> seed;
  // transformers' cap on prompt plus generated tokens, kept only when the file gave it without max_new_tokens
  // (max_new_tokens takes precedence in transformers). A caller that sets max_new_tokens resets it.
  std::optional<int64_t> max_length;

  // Parses the JSON text of a generation_config.json; `source_name` (the file's name or path) opens every error.
  // Throws ConfigError on one line naming the source and the key: a value of the wrong type or out of range, or a
  // key that selects decoding this library does not implement.
  static GenerationConfig from_json(const std::string& text, const std::string& source_name);
  // Reads `path` and parses it as from_json(text, path) does.
  static GenerationConfig from_file(const std::string& path);

  // transformers' checks of the values above (temperature > 0 when sampling, top_p in (0, 1], top_k >= 0,
  // repetition_penalty > 0, max_new_tokens > 0, non-negative token ids): ConfigError naming `source_name` and the
  // key. from_json runs it; process_logits runs it too, for configs built or changed in code.
  void check(const std::string& source_name) const;

  // The tokens generate may add to a prompt of `prompt_length` tokens: max_new_tokens, or what max_length leaves
  // of the prompt (at least 1: transformers checks the length only after each new token).
  int64_t new_token_limit(int64_t prompt_length) const;
};

}  // namespace deepspeed::inference
