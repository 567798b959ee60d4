// RaggedEngineConfig (deepspeed/inference/ragged_engine.h): DeepSpeed's RaggedInferenceEngineConfig,
// DSStateManagerConfig and MemoryConfig (deepspeed/inference/v2/config_v2.py, ragged/manager_configs.py) read with
// their key names, aliases (tp, manager), defaults and checks (positive integers; max_ragged_sequence_count at most
// max_tracked_sequences and max_ragged_batch_size), plus our two keys kv_block_size and dtype. What DeepSpeed accepts
// but is not built here (offload, quantization) is refused by name unless off.
#include <algorithm>
#include <initializer_list>
#include <string>

#include "deepspeed/error.h"
#include "deepspeed/inference/inference_config.h"
#include "deepspeed/inference/ragged_engine.h"
#include "inference/json_fields.h"

namespace deepspeed::inference {
namespace {

using json_fields::got;
using json_fields::Json;
using json_fields::value_of;

// The section `name` (or its DeepSpeed alias) of `j` as an object, or nullptr when absent.
const Json* ragged_section(const Json& j, const std::string& source, const char* name, const char* alias) {
  // Unlike a value, a section set to null is refused, as DeepSpeed refuses it.
  auto find = [&j](const char* key) -> const Json* {
    const auto it = key != nullptr ? j.find(key) : j.end();
    return it == j.end() ? nullptr : &*it;
  };
  const Json* a = find(name);
  const Json* b = find(alias);
  DS_CHECK_T(ConfigError, a == nullptr || b == nullptr, source, ": ", name, " is given twice (as ", name,
             " and as its ", "alias ", alias, ")");
  const Json* s = a != nullptr ? a : b;
  if (s != nullptr) DS_CHECK_T(ConfigError, s->is_object(), source, ": ", name, " must be an object, got ", got(*s));
  return s;
}

void ragged_refuse_unknown(const Json& section, const std::string& source, const std::string& path,
                           std::initializer_list<const char*> known) {
  for (const auto& item : section.items()) {
    const std::string& key = item.key();
    const bool ok = std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; });
    if (ok) continue;
    std::string names;
    for (const char* k : known) names += (names.empty() ? "" : ", ") + path + k;
    throw ConfigError(source + ": unknown key " + path + detail::printable(key) + " (known: " + names + ")");
  }
}

// A positive integer at `key` of `section` (DeepSpeed's PositiveInt), when given.
void ragged_read_positive(const Json& section, const std::string& source, const std::string& path, const char* key,
                          int64_t& out) {
  const Json* v = value_of(section, key);
  if (v == nullptr) return;
  const std::string name = path + key;
  DS_CHECK_T(ConfigError, v->is_number_integer(), source, ": ", name, " must be an integer, got ", got(*v));
  out = v->get<int64_t>();
  DS_CHECK_T(ConfigError, out >= 1, source, ": ", name, " must be >= 1, got ", out);
}

void read_memory_config(const Json& manager, const std::string& source, RaggedEngineConfig& c) {
  const Json* memory = ragged_section(manager, source, "memory_config", nullptr);
  if (memory == nullptr) return;
  ragged_refuse_unknown(*memory, source, "state_manager.memory_config.", {"mode", "size"});
  if (const Json* mode = value_of(*memory, "mode")) {
    DS_CHECK_T(ConfigError, mode->is_string() && (*mode == "reserve" || *mode == "allocate"), source,
               ": state_manager.memory_config.mode must be \"reserve\" or \"allocate\", got ", got(*mode));
    c.memory_mode = mode->get<std::string>();
  }
  ragged_read_positive(*memory, source, "state_manager.memory_config.", "size", c.memory_size);
}

void read_state_manager(const Json& j, const std::string& source, RaggedEngineConfig& c) {
  const Json* m = ragged_section(j, source, "state_manager", "manager");
  if (m == nullptr) return;
  const std::string path = "state_manager.";
  ragged_refuse_unknown(*m, source, path,
                        {"max_tracked_sequences", "max_ragged_batch_size", "max_ragged_sequence_count", "max_context",
                         "memory_config", "offload"});
  ragged_read_positive(*m, source, path, "max_tracked_sequences", c.max_tracked_sequences);
  ragged_read_positive(*m, source, path, "max_ragged_batch_size", c.max_ragged_batch_size);
  ragged_read_positive(*m, source, path, "max_ragged_sequence_count", c.max_ragged_sequence_count);
  ragged_read_positive(*m, source, path, "max_context", c.max_context);
  read_memory_config(*m, source, c);
  if (const Json* offload = value_of(*m, "offload")) {
    DS_CHECK_T(ConfigError, offload->is_boolean(), source, ": state_manager.offload must be true or false, got ",
               got(*offload));
    DS_CHECK_T(ConfigError, !offload->get<bool>(), source,
               ": state_manager.offload true is not implemented (KV cache offload)");
  }
}

void read_ragged_top_level(const Json& j, const std::string& source, RaggedEngineConfig& c) {
  ragged_refuse_unknown(
      j, source, "", {"tensor_parallel", "tp", "state_manager", "manager", "quantization", "kv_block_size", "dtype"});
  if (const Json* tp = ragged_section(j, source, "tensor_parallel", "tp")) {
    ragged_refuse_unknown(*tp, source, "tensor_parallel.", {"tp_size"});
    int64_t size = c.tp_size;
    ragged_read_positive(*tp, source, "tensor_parallel.", "tp_size", size);
    c.tp_size = static_cast<int>(size);
  }
  if (const Json* q = ragged_section(j, source, "quantization", nullptr)) {
    ragged_refuse_unknown(*q, source, "quantization.", {"quantization_mode"});
    const Json* mode = value_of(*q, "quantization_mode");
    DS_CHECK_T(ConfigError, mode == nullptr, source, ": quantization.quantization_mode ", got(*mode),
               " is not implemented (quantized serving; leave it null)");
  }
  ragged_read_positive(j, source, "", "kv_block_size", c.kv_block_size);
  if (const Json* v = value_of(j, "dtype")) {
    DS_CHECK_T(ConfigError, v->is_string(), source, ": dtype must be a string such as \"bf16\", got ", got(*v));
    c.dtype = InferenceConfig::parse_dtype(v->get<std::string>(), source);
  }
}

}  // namespace

RaggedEngineConfig RaggedEngineConfig::from_json(const std::string& text, const std::string& source_name) {
  const Json j = json_fields::parse_object(text, source_name);
  RaggedEngineConfig c;
  read_ragged_top_level(j, source_name, c);
  read_state_manager(j, source_name, c);
  // DSStateManagerConfig's validator.
  DS_CHECK_T(ConfigError, c.max_ragged_sequence_count <= c.max_tracked_sequences, source_name,
             ": state_manager.max_ragged_sequence_count ", c.max_ragged_sequence_count,
             " must not exceed state_manager.max_tracked_sequences ", c.max_tracked_sequences);
  DS_CHECK_T(ConfigError, c.max_ragged_sequence_count <= c.max_ragged_batch_size, source_name,
             ": state_manager.max_ragged_sequence_count ", c.max_ragged_sequence_count,
             " must not exceed state_manager.max_ragged_batch_size ", c.max_ragged_batch_size);
  return c;
}

RaggedEngineConfig RaggedEngineConfig::from_file(const std::string& path) {
  return from_json(json_fields::read_text(path, "serving config"), path);
}

}  // namespace deepspeed::inference
