// Keys DeepSpeed has whose value selects behaviour deepspeed-cpp implements one way only: each rule is accepted at
// the value that says what we do and refuses the other by name when the config is read. The rules are data, so the
// parser, the README's table (`ds_check_config --refusals_markdown`) and the test of each rule's example come from
// one list. Stateless; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::config {

struct ValueRule {
  std::string key;      // the JSON path the refusal names
  std::string when;     // when it is refused, in words (README)
  std::string example;  // a config this rule refuses (README's message column, and its test)
  std::function<bool(const Config&)> refused;
  std::function<std::string(const Config&)> message;  // after "<key>: "
};

const std::vector<ValueRule>& implemented_value_rules();

// Throws ConfigError "<key>: <message>" for the first rule `config` breaks.
void check_implemented_values(const Config& config);

// The README's table of these rules: key, when, and the message its example gets (up to the first "; ").
std::string implemented_values_markdown();

}  // namespace deepspeed::config
