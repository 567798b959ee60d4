#include "config/rule_table.h"

#include <sstream>

namespace deepspeed::config {

std::string zero_example(const std::string& keys) { return R"({"zero_optimization": {)" + keys + "}}"; }

void apply_rules(const std::vector<Rule>& rules, const Config& config) {
  for (const Rule& r : rules)
    if (r.refused(config)) throw ConfigError(r.message(config));
}

std::string rules_markdown(const std::vector<Rule>& rules, const std::function<void(const std::string&)>& check) {
  std::ostringstream os;
  os << "| key | refused when | message |\n| --- | --- | --- |\n";
  for (const Rule& r : rules) {
    std::string shown = "(its example is accepted)";
    try {
      check(r.example);
    } catch (const ConfigError& e) {
      shown = e.what();
    }
    if (shown.rfind(r.key, 0) == 0) shown = "..." + shown.substr(r.key.size());
    if (const size_t semi = shown.find("; "); semi != std::string::npos) shown = shown.substr(0, semi) + "; ...";
    os << "| `" << r.key << "` | " << r.when << " | `" << shown << "` |\n";
  }
  return os.str();
}

}  // namespace deepspeed::config
