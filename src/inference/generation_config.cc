// GenerationConfig (deepspeed/inference/generation_config.h): transformers' generation_config.json keys and
// defaults, and a ConfigError naming the file and key for a value of the wrong type, out of range, or selecting a
// decoding this library does not implement.
#include "deepspeed/inference/generation_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "deepspeed/error.h"
#include "inference/json_fields.h"

namespace deepspeed::inference {
namespace {

using json_fields::got;
using json_fields::integer_of;
using json_fields::Json;
using json_fields::read_bool;
using json_fields::read_integer;
using json_fields::read_number;
using json_fields::value_of;

// A key of transformers' GenerationConfig that changes which tokens come out when it leaves its default. A file
// setting one is refused: decoding without it would give other text than transformers does. Keys that change
// nothing here are not listed and are ignored: bos_token_id and decoder_start_token_id (generate starts from the
// prompt), early_stopping and length_penalty (beam search only, itself refused), renormalize_logits (a
// log-softmax after the processors moves no argmax and no sampling probability), use_cache, cache_implementation
// and other speed or output-format switches, transformers_version, _from_model_config.
struct Unimplemented {
  const char* key;
  Json inert;        // transformers' default: the key changes nothing at this value, at null, or as an empty list
  const char* mode;  // what transformers would do instead
};

const std::vector<Unimplemented>& unimplemented_keys() {
  static const std::vector<Unimplemented> kKeys = {
      {"num_beams", 1, "beam search"},
      {"num_beam_groups", 1, "group beam search"},
      {"diversity_penalty", 0.0, "group beam search"},
      {"constraints", nullptr, "constrained beam search"},
      {"force_words_ids", nullptr, "constrained beam search"},
      {"penalty_alpha", 0.0, "contrastive search"},
      {"dola_layers", nullptr, "DoLa decoding"},
      {"prompt_lookup_num_tokens", nullptr, "prompt lookup decoding"},
      {"assistant_early_exit", nullptr, "self-speculative decoding"},
      {"use_mtp", false, "multi-token prediction"},
      {"guidance_scale", 1.0, "classifier-free guidance"},
      {"typical_p", 1.0, "typical sampling"},
      {"min_p", 0.0, "min-p sampling"},
      {"top_h", nullptr, "top-h sampling"},
      {"epsilon_cutoff", 0.0, "epsilon sampling"},
      {"eta_cutoff", 0.0, "eta sampling"},
      {"no_repeat_ngram_size", 0, "n-gram blocking"},
      {"encoder_no_repeat_ngram_size", 0, "n-gram blocking"},
      {"encoder_repetition_penalty", 1.0, "an encoder repetition penalty"},
      {"bad_words_ids", nullptr, "banned token sequences"},
      {"sequence_bias", nullptr, "token sequence biases"},
      {"suppress_tokens", nullptr, "suppressed tokens"},
      {"begin_suppress_tokens", nullptr, "suppressed first tokens"},
      {"forced_bos_token_id", nullptr, "a forced first token"},
      {"forced_eos_token_id", nullptr, "a forced last token"},
      {"min_length", 0, "a minimum length"},
      {"min_new_tokens", 0, "a minimum length"},
      {"exponential_decay_length_penalty", nullptr, "a length penalty on the end of sequence"},
      {"num_return_sequences", 1, "several sequences per prompt"},
      {"max_time", nullptr, "a time limit"},
      {"stop_strings", nullptr, "stop strings"},
      {"remove_invalid_values", false, "replacing nan and inf scores"},
      {"token_healing", false, "token healing"},
      {"watermarking_config", nullptr, "watermarking"},
  };
  return kKeys;
}

void refuse_unimplemented(const Json& j, const std::string& source) {
  for (const Unimplemented& u : unimplemented_keys()) {
    if (!j.contains(u.key)) continue;
    const Json& v = j[u.key];
    const bool inert = v.is_null() || v == u.inert || (v.is_array() && v.empty()) || (v.is_object() && v.empty());
    DS_CHECK_T(ConfigError, inert, source, ": ", u.key, " ", detail::printable(v.dump()), " is not implemented (",
               u.mode, "; only greedy search and sampling are; transformers' default is ", u.inert.dump(), ")");
  }
}

// eos_token_id: one id or a list of them, as transformers accepts.
std::vector<int64_t> read_token_ids(const Json& j, const std::string& source, const char* key) {
  const Json* v = value_of(j, key);
  if (v == nullptr) return {};
  const Json list = v->is_array() ? *v : Json::array({*v});
  std::vector<int64_t> ids;
  for (const Json& id : list) {
    DS_CHECK_T(ConfigError, id.is_number_integer(), source, ": ", key,
               " must be a token id or a list of token ids, got ", got(*v));
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

}  // namespace

GenerationConfig GenerationConfig::from_json(const std::string& text, const std::string& source_name) {
  const Json j = json_fields::parse_object(text, source_name);
  refuse_unimplemented(j, source_name);

  GenerationConfig c;
  read_integer(j, source_name, "max_new_tokens", c.max_new_tokens);
  if (value_of(j, "max_new_tokens") == nullptr && value_of(j, "max_length") != nullptr)
    c.max_length = integer_of(j["max_length"], source_name, "max_length");
  read_bool(j, source_name, "do_sample", c.do_sample);
  read_number(j, source_name, "temperature", c.temperature);
  read_integer(j, source_name, "top_k", c.top_k);
  read_number(j, source_name, "top_p", c.top_p);
  read_number(j, source_name, "repetition_penalty", c.repetition_penalty);
  c.eos_token_id = read_token_ids(j, source_name, "eos_token_id");
  if (const Json* v = value_of(j, "pad_token_id")) c.pad_token_id = integer_of(*v, source_name, "pad_token_id");
  c.check(source_name);
  return c;
}

GenerationConfig GenerationConfig::from_file(const std::string& path) {
  return from_json(json_fields::read_text(path, "generation config"), path);
}

void GenerationConfig::check(const std::string& source_name) const {
  const std::string& s = source_name;
  DS_CHECK_T(ConfigError, max_new_tokens > 0, s, ": max_new_tokens must be > 0, got ", max_new_tokens);
  DS_CHECK_T(ConfigError, !max_length || *max_length > 0, s, ": max_length must be > 0, got ", max_length.value_or(0));
  DS_CHECK_T(ConfigError, !do_sample || temperature > 0, s, ": temperature must be > 0 when do_sample is true, got ",
             temperature, " (for greedy decoding set do_sample to false)");
  DS_CHECK_T(ConfigError, top_k >= 0, s, ": top_k must be >= 0 (0 disables it), got ", top_k);
  DS_CHECK_T(ConfigError, top_p > 0 && top_p <= 1, s, ": top_p must be in (0, 1], got ", top_p);
  DS_CHECK_T(ConfigError, repetition_penalty > 0, s, ": repetition_penalty must be > 0 (1 disables it), got ",
             repetition_penalty);
  for (const int64_t id : eos_token_id)
    DS_CHECK_T(ConfigError, id >= 0, s, ": eos_token_id must hold token ids >= 0, got ", id);
  DS_CHECK_T(ConfigError, !pad_token_id || *pad_token_id >= 0, s, ": pad_token_id must be >= 0, got ",
             pad_token_id.value_or(0));
}

int64_t GenerationConfig::new_token_limit(int64_t prompt_length) const {
  if (!max_length) return max_new_tokens;
  return std::max<int64_t>(1, *max_length - prompt_length);
}

}  // namespace deepspeed::inference
