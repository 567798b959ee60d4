#include "config/rule_table.h"

#include <sstream>

namespace deepspeed::config {

Rule make_rule(std::string key, std::string when, std::string example, std::function<bool(const Config&)> refused,
               std::function<std::string(const Config&)> message) {
  return Rule{std::move(key), std::move(when), std::move(example), std::move(refused), std::move(message)};
}

Rule make_rule(std::string key, std::string when, std::string example, std::function<bool(const Config&)> refused,
               const std::string& message) {
  return make_rule(std::move(key), std::move(when), std::move(example), std::move(refused),
                   [message](const Config&) { return message; });
}

std::string zero_example(const std::string& keys) { return R"({"zero_optimization": {)" + keys + "}}"; }

void apply_rules(const std::vector<Rule>& rules, const Config& config) {
  for (const Rule& r : rules)
    if (r.refused(config)) throw ConfigError(r.message(config));
}

std::string shortened_message(const std::string& key, std::string message) {
  if (message.rfind(key, 0) == 0) message = "..." + message.substr(key.size());
  if (const size_t semi = message.find("; "); semi != std::string::npos) message = message.substr(0, semi) + "; ...";
  return message;
}

std::string rules_markdown(const std::vector<Rule>& rules, const std::function<void(const std::string&)>& check) {
  std::ostringstream os;
  os << "| key | refused when | message |\n| --- | --- | --- |\n";
  for (const Rule& r : rules) {
    std::string shown = r.example.empty() ? "(a Config built in code only)" : "(its example is accepted)";
    try {
      if (!r.example.empty()) check(r.example);
    } catch (const ConfigError& e) {
      shown = e.what();
    }
    if (!r.example.empty()) shown = shortened_message(r.key, shown);
    const std::string cell = r.example.empty() ? shown : "`" + shown + "`";
    os << "| `" << r.key << "` | " << r.when << " | " << cell << " |\n";
  }
  return os.str();
}

}  // namespace deepspeed::config
