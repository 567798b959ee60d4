// Keys DeepSpeed has whose value selects behaviour deepspeed-cpp implements one way only: each rule is accepted at
// the value that says what we do and refuses the other by name when the config is read. The rules are data, so the
// parser, the README's table (`ds_check_config --refusals_markdown`) and the test of each rule's example come from
// one list. Stateless; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "config/rule_table.h"

namespace deepspeed::config {

const std::vector<Rule>& implemented_value_rules();

// Throws ConfigError "<key>: <message>" for the first rule `config` breaks.
void check_implemented_values(const Config& config);

// The README's table of these rules (rules_markdown).
std::string implemented_values_markdown();

}  // namespace deepspeed::config
