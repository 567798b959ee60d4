// Command-line overrides of a config's JSON ("zero_optimization.stage=3"), applied before
// validation so they are checked exactly like the file's own values. Stateless; thread-safe.
#include "config/sections.h"
#include "deepspeed/error.h"

namespace deepspeed::config {

void apply_override(Json* root, const std::string& assignment) {
  const std::string where = "--set " + assignment;
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos) throw ConfigError(where + ": expected KEY=VALUE");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> keys;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    keys.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (keys.back().empty())
      throw ConfigError(where + ": empty key in the dotted path '" + path + "'");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // A value that is JSON is taken as JSON (3e-4, true, [0.9, 0.95], "auto"); anything else is a
  // string, so --set optimizer.type=AdamW needs no shell-quoted quotes.
  Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;
  Json* node = root;
  std::string walked;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    walked = join_path(walked, keys[i]);
    if (!node->is_object()) break;
    Json& child = (*node)[keys[i]];
    if (child.is_null()) child = Json::object();
    if (!child.is_object()) {
      throw ConfigError(where + ": " + walked + " is " + describe(child) + ", not an object");
    }
    node = &child;
  }
  if (!node->is_object()) throw ConfigError(where + ": the config is not a JSON object");
  (*node)[keys.back()] = value;
}

}  // namespace deepspeed::config
