// The catalogue of every key a config may hold, drawn from the section tables (key_table.h): for
// `ds_check_config --explain KEY` and the README's key table (`ds_check_config --keys_markdown`, checked against
// the README by a test). Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "config/key_table.h"

namespace deepspeed::config {

// Every key, top level first, each section's keys after the key that holds it.
const std::vector<KeyInfo>& config_keys();

// A few lines on one key (its dotted path or an alias): type, default, "auto", DeepSpeed's treatment, ours.
// Throws ConfigError naming the path, with a did-you-mean, when no key has it.
std::string explain_key(const std::string& path);

// The Markdown table of every key, one row each.
std::string key_table_markdown();

// The README's "auto" table: what resolve_auto fills for a few example configs and programs, as it prints it
// (auto_values.cc).
std::string auto_values_markdown();

}  // namespace deepspeed::config
