// LlamaConfig::from_json (deepspeed/models/llama.h): transformers' config.json for the four architectures, with each
// key's transformers default, and a ConfigError naming the key and value for anything this model does not build.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "deepspeed/error.h"
#include "deepspeed/models/llama.h"

namespace deepspeed::models {
namespace {

using Json = nlohmann::json;

// Reads keys of one JSON object, naming the file and key in every refusal.
class Keys {
 public:
  Keys(const Json& object, std::string where, std::string prefix = "")
      : j_(object), where_(std::move(where)), prefix_(std::move(prefix)) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  std::string what(const char* key) const { return where_ + ": " + prefix_ + key; }
  const std::string& where() const { return where_; }
  int64_t integer(const char* key, std::optional<int64_t> fallback, int64_t min = 1) const {
    if (!has(key)) {
      DS_CHECK_T(ConfigError, fallback.has_value(), what(key), " is required");
      return *fallback;
    }
    const Json& v = j_[key];
    DS_CHECK_T(ConfigError, v.is_number_integer() && v.get<int64_t>() >= min, what(key), " must be an integer >= ", min,
               ", got ", v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    DS_CHECK_T(ConfigError, j_[key].is_number(), what(key), " must be a number, got ", j_[key].dump());
    return j_[key].get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    DS_CHECK_T(ConfigError, j_[key].is_boolean(), what(key), " must be true or false, got ", j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    DS_CHECK_T(ConfigError, j_[key].is_string(), what(key), " must be a string, got ", j_[key].dump());
    return j_[key].get<std::string>();
  }

 private:
  const Json& j_;
  std::string where_, prefix_;
};

const std::set<std::string>& architectures() {
  static const std::set<std::string> kNames = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                               "Qwen3ForCausalLM"};
  return kNames;
}

std::string architecture_of(const Json& j, const Keys& keys) {
  if (keys.has("architectures")) {
    const Json& a = j["architectures"];
    DS_CHECK_T(ConfigError, a.is_array() && a.size() == 1 && a[0].is_string(), keys.what("architectures"),
               " must list one architecture, got ", a.dump());
    const std::string name = a[0].get<std::string>();
    DS_CHECK_T(ConfigError, architectures().count(name) > 0, keys.what("architectures"), " \"", name,
               "\" is not implemented (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
    return name;
  }
  static const std::map<std::string, std::string> kByType = {{"llama", "LlamaForCausalLM"},
                                                             {"mistral", "MistralForCausalLM"},
                                                             {"qwen2", "Qwen2ForCausalLM"},
                                                             {"qwen3", "Qwen3ForCausalLM"}};
  const std::string type = keys.text("model_type", "");
  const auto it = kByType.find(type);
  DS_CHECK_T(ConfigError, it != kByType.end(), keys.what("model_type"), " \"", type,
             "\" is not implemented (llama, mistral, qwen2, qwen3), and there is no architectures entry");
  return it->second;
}

// rope_theta and the scaling: transformers 5's rope_parameters, or the top-level rope_theta and rope_scaling of
// published checkpoints (where the type is "rope_type" or the older "type").
void read_rope(const Json& j, const Keys& keys, LlamaConfig& c) {
  const bool v5 = keys.has("rope_parameters");
  const char* section = v5 ? "rope_parameters" : "rope_scaling";
  c.rope_theta = keys.number("rope_theta", 10000.0);
  if (!keys.has(section)) return;
  const Json& r = j[section];
  DS_CHECK_T(ConfigError, r.is_object(), keys.what(section), " must be an object, got ", r.dump());
  const Keys rk(r, keys.where(), std::string(section) + ".");
  if (v5) c.rope_theta = rk.number("rope_theta", c.rope_theta);
  const char* type_key = rk.has("rope_type") ? "rope_type" : "type";
  const std::string type = rk.text(type_key, "default");
  DS_CHECK_T(ConfigError, type == "default" || type == "linear" || type == "llama3", rk.what(type_key), " \"", type,
             "\" is not implemented (default, linear, llama3)");
  DS_CHECK_T(ConfigError, rk.number("partial_rotary_factor", 1.0) == 1.0, rk.what("partial_rotary_factor"), " ",
             r.value("partial_rotary_factor", Json()).dump(), " is not implemented (the whole head rotates)");
  c.rope_scaling.type = type;
  if (type == "default") return;
  c.rope_scaling.factor = rk.number("factor", 1.0);
  DS_CHECK_T(ConfigError, c.rope_scaling.factor > 0, rk.what("factor"), " must be > 0, got ", c.rope_scaling.factor);
  if (type != "llama3") return;
  c.rope_scaling.low_freq_factor = rk.number("low_freq_factor", 1.0);
  c.rope_scaling.high_freq_factor = rk.number("high_freq_factor", 4.0);
  c.rope_scaling.original_max_position_embeddings =
      rk.integer("original_max_position_embeddings", c.max_position_embeddings);
  DS_CHECK_T(ConfigError, c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor, rk.what("high_freq_factor"),
             " must exceed low_freq_factor");
}

// The biases, norms and window each architecture has, and the keys it must not set.
void read_family(const Keys& keys, LlamaConfig& c) {
  const std::string& a = c.architecture;
  const bool attention_bias = keys.flag("attention_bias", false);
  const bool mlp_bias = keys.flag("mlp_bias", false);
  if (a == "LlamaForCausalLM" || a == "Qwen3ForCausalLM") {
    c.qkv_bias = c.o_bias = attention_bias;
  } else {
    DS_CHECK_T(ConfigError, !attention_bias, keys.what("attention_bias"), " true: ", a,
               " has no such option (transformers builds it with fixed biases)");
    c.qkv_bias = a == "Qwen2ForCausalLM";
  }
  DS_CHECK_T(ConfigError, !mlp_bias || a == "LlamaForCausalLM", keys.what("mlp_bias"), " true: ", a,
             " has no MLP biases");
  c.mlp_bias = mlp_bias;
  c.qk_norm = a == "Qwen3ForCausalLM";
  if (a == "MistralForCausalLM") {
    if (keys.has("sliding_window")) c.sliding_window = keys.integer("sliding_window", std::nullopt);
  } else if (a != "LlamaForCausalLM") {
    DS_CHECK_T(ConfigError, !keys.flag("use_sliding_window", false), keys.what("use_sliding_window"),
               " true is not implemented (sliding-window attention on some layers)");
  }
}

at::ScalarType dtype_of(const Keys& keys) {
  const char* key = keys.has("dtype") ? "dtype" : "torch_dtype";
  const std::string name = keys.text(key, "float32");
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw ConfigError(keys.what(key) + " \"" + name + "\" is not one of float32, bfloat16, float16");
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const std::string& text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw ConfigError(where + ": not JSON (" + e.what() + ")");
  }
  DS_CHECK_T(ConfigError, j.is_object(), where, ": not a JSON object");
  const Keys keys(j, where);
  LlamaConfig c;
  c.json = text;
  c.architecture = architecture_of(j, keys);
  c.vocab_size = keys.integer("vocab_size", std::nullopt);
  c.hidden_size = keys.integer("hidden_size", std::nullopt);
  c.intermediate_size = keys.integer("intermediate_size", std::nullopt);
  c.num_hidden_layers = keys.integer("num_hidden_layers", std::nullopt);
  c.num_attention_heads = keys.integer("num_attention_heads", std::nullopt);
  c.num_key_value_heads = keys.integer("num_key_value_heads", c.num_attention_heads);
  DS_CHECK_T(ConfigError, c.num_attention_heads % c.num_key_value_heads == 0, keys.what("num_key_value_heads"), " ",
             c.num_key_value_heads, " must divide num_attention_heads ", c.num_attention_heads);
  DS_CHECK_T(ConfigError, keys.has("head_dim") || c.hidden_size % c.num_attention_heads == 0,
             keys.what("num_attention_heads"), " ", c.num_attention_heads, " must divide hidden_size ", c.hidden_size,
             " when the config gives no head_dim");
  c.head_dim = keys.integer("head_dim", c.hidden_size / c.num_attention_heads);
  DS_CHECK_T(ConfigError, c.head_dim % 2 == 0, keys.what("head_dim"), " must be even for rotary embeddings, got ",
             c.head_dim);
  c.max_position_embeddings = keys.integer("max_position_embeddings", 2048);
  c.rms_norm_eps = keys.number("rms_norm_eps", 1e-6);
  DS_CHECK_T(ConfigError, c.rms_norm_eps > 0, keys.what("rms_norm_eps"), " must be > 0, got ", c.rms_norm_eps);
  const std::string act = keys.text("hidden_act", "silu");
  DS_CHECK_T(ConfigError, act == "silu", keys.what("hidden_act"), " \"", act, "\" is not implemented (silu)");
  DS_CHECK_T(ConfigError, keys.number("attention_dropout", 0.0) == 0.0, keys.what("attention_dropout"), " ",
             j.value("attention_dropout", Json()).dump(), " is not implemented (0)");
  read_rope(j, keys, c);
  read_family(keys, c);
  c.tie_word_embeddings = keys.flag("tie_word_embeddings", false);
  c.initializer_range = keys.number("initializer_range", 0.02);
  c.dtype = dtype_of(keys);
  return c;
}

LlamaConfig LlamaConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  DS_CHECK_T(ConfigError, in.good(), path, ": cannot read the model's config.json");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path);
}

void LlamaConfig::check_sequence(int64_t tokens) const {
  DS_CHECK_T(ConfigError, !sliding_window || tokens <= *sliding_window, "config.json: sliding_window ",
             sliding_window.value_or(0), " is shorter than the sequence of ", tokens,
             " tokens (sliding-window attention is not implemented)");
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t attention = hidden_size * (q + 2 * kv) + q * hidden_size;
  if (qkv_bias) attention += q + 2 * kv;
  if (o_bias) attention += hidden_size;
  if (qk_norm) attention += 2 * head_dim;
  int64_t mlp = 3 * hidden_size * intermediate_size;
  if (mlp_bias) mlp += 2 * intermediate_size + hidden_size;
  const int64_t layer = attention + mlp + 2 * hidden_size;
  const int64_t embeddings = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2);
  return num_hidden_layers * layer + embeddings + hidden_size;
}

}  // namespace deepspeed::models
