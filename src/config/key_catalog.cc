#include "config/key_catalog.h"

#include <sstream>

#include "config/sections.h"
#include "config/suggest.h"
#include "deepspeed/error.h"

namespace deepspeed::config {

std::string choice_type_text(const std::vector<std::string>& choices) { return "one of " + join(choices); }

const std::vector<KeyInfo>& config_keys() {
  static const std::vector<KeyInfo> kKeys = config_section().keys("");
  return kKeys;
}

namespace {

const KeyInfo* find_key(const std::string& path) {
  for (const KeyInfo& k : config_keys()) {
    if (k.path == path) return &k;
    for (const std::string& a : k.aliases)
      if (a == path) return &k;
  }
  return nullptr;
}

std::string deepspeed_text(const KeyInfo& k) {
  if (k.deepspeed == "pydantic field") return "a field of its pydantic model (unknown keys beside it are refused)";
  if (k.deepspeed == "read from a dict") return "read from a dict (unknown keys beside it are ignored)";
  return "an argument of the optimizer's or scheduler's constructor (unknown names are refused)";
}

// The README column: pydantic, dict or constructor.
std::string deepspeed_column(const KeyInfo& k) {
  return k.deepspeed == "pydantic field" ? "pydantic" : k.deepspeed == "read from a dict" ? "dict" : "constructor";
}

}  // namespace

std::string explain_key(const std::string& path) {
  const KeyInfo* k = find_key(path);
  if (!k) {
    // A bare name ("stage3_max_live_parameters") points at the key that ends with it; else the nearest path.
    std::vector<std::string> paths;
    std::string near;
    for (const KeyInfo& info : config_keys()) {
      paths.push_back(info.path);
      const size_t dot = info.path.rfind('.');
      if (near.empty() && dot != std::string::npos && info.path.substr(dot + 1) == path) near = info.path;
    }
    if (near.empty()) near = did_you_mean(path, paths);
    fail_at(path, "no such config key" + (near.empty() ? std::string() : " (did you mean '" + near + "'?)"));
  }
  std::ostringstream os;
  os << k->path << "\n";
  if (!k->aliases.empty()) os << "  also spelt: " << join(k->aliases) << "\n";
  os << "  type:      " << k->type << "\n";
  if (!k->default_json.empty()) os << "  default:   " << k->default_json << "\n";
  os << "  \"auto\":    " << (k->accepts_auto ? "read; filled at initialize where the Hugging Face integration would fill it "
                                       "(README: \"auto\"), else refused there by name"
                                     : "refused")
     << "\n";
  os << "  DeepSpeed: " << deepspeed_text(*k) << "\n";
  os << "  here:      " << k->ours << "\n";
  return os.str();
}

std::string key_table_markdown() {
  std::ostringstream os;
  os << "| key | type | default | DeepSpeed reads it | here |\n| --- | --- | --- | --- | --- |\n";
  for (const KeyInfo& k : config_keys()) {
    std::string key = "`" + k.path + "`";
    for (const std::string& a : k.aliases) key += " (`" + a + "`)";
    std::string type = k.type + (k.accepts_auto ? ", \"auto\"" : "");
    std::string deflt = k.default_json.empty() ? "" : k.default_json == "unset" ? "unset" : "`" + k.default_json + "`";
    std::string ds = deepspeed_column(k);
    std::string ours = k.ours;
    for (std::string* cell : {&key, &type, &deflt, &ds, &ours}) {
      std::string escaped;
      for (char ch : *cell) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
      *cell = escaped;
    }
    os << "| " << key << " | " << type << " | " << deflt << " | " << ds << " | " << ours << " |\n";
  }
  return os.str();
}

}  // namespace deepspeed::config
