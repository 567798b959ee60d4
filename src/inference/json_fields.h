// Reading the fields of inference's JSON files (generation_config.json, the init_inference config): a ConfigError
// naming the file and the key for a value of the wrong type; null reads as unset, as transformers and DeepSpeed do.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "deepspeed/error.h"

namespace deepspeed::inference::json_fields {

using Json = nlohmann::json;

// The whole text of `path`; ConfigError "<path>: cannot read the <what>".
inline std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path);
  DS_CHECK_T(ConfigError, in.good(), path, ": cannot read the ", what);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The parsed object of `text`; ConfigError "<source>: not JSON (...)" or "<source>: not a JSON object".
inline Json parse_object(const std::string& text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw ConfigError(source + ": not JSON (" + detail::printable(e.what()) + ")");
  }
  DS_CHECK_T(ConfigError, j.is_object(), source, ": not a JSON object");
  return j;
}

// The value of `key`, or nullptr when the file leaves it out or sets it to null.
inline const Json* value_of(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

inline std::string got(const Json& v) { return detail::printable(v.dump()); }

inline int64_t integer_of(const Json& v, const std::string& source, const char* key) {
  DS_CHECK_T(ConfigError, v.is_number_integer(), source, ": ", key, " must be an integer, got ", got(v));
  return v.get<int64_t>();
}

inline void read_integer(const Json& j, const std::string& source, const char* key, int64_t& out) {
  if (const Json* v = value_of(j, key)) out = integer_of(*v, source, key);
}

inline void read_number(const Json& j, const std::string& source, const char* key, double& out) {
  const Json* v = value_of(j, key);
  if (v == nullptr) return;
  DS_CHECK_T(ConfigError, v->is_number(), source, ": ", key, " must be a number, got ", got(*v));
  out = v->get<double>();
}

inline void read_bool(const Json& j, const std::string& source, const char* key, bool& out) {
  const Json* v = value_of(j, key);
  if (v == nullptr) return;
  DS_CHECK_T(ConfigError, v->is_boolean(), source, ": ", key, " must be true or false, got ", got(*v));
  out = v->get<bool>();
}

}  // namespace deepspeed::inference::json_fields
