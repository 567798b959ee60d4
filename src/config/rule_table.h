// A refusal rule as data: the key it names, when it applies in words, a config it refuses, the test and the message.
// Rules kept this way (implemented_values.h: values read one way only; feature_gate.h: features not built yet)
// give the parser or the gate, the README's tables and a test of every example from one list. Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::config {

struct Rule {
  std::string key;      // the JSON path the refusal names
  std::string when;     // when it is refused, in words (README)
  std::string example;  // a config this rule refuses (README's message column, and its test)
  std::function<bool(const Config&)> refused;
  std::function<std::string(const Config&)> message;  // the whole message, starting with the key
};

// A rule with its message built from the config, or fixed.
Rule make_rule(std::string key, std::string when, std::string example, std::function<bool(const Config&)> refused,
               std::function<std::string(const Config&)> message);
Rule make_rule(std::string key, std::string when, std::string example, std::function<bool(const Config&)> refused,
               const std::string& message);

// {"zero_optimization": {<keys>}}: most examples are one of these.
std::string zero_example(const std::string& keys);

// Throws ConfigError with the message of the first rule `config` breaks.
void apply_rules(const std::vector<Rule>& rules, const Config& config);

// A refusal as the README's tables show it: the leading `key` replaced by "...", cut at the first "; ".
std::string shortened_message(const std::string& key, std::string message);

// A Markdown table (key, refused when, message): the message is what `check` throws for each rule's example, with
// the key replaced by "..." and cut at its first "; ".
std::string rules_markdown(const std::vector<Rule>& rules, const std::function<void(const std::string&)>& check);

}  // namespace deepspeed::config
