// Small string helpers shared by the launcher's parsers (hostfile, --include/--exclude, core
// lists). Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace deepspeed::launcher {

// `s` without leading and trailing whitespace.
std::string trim(const std::string& s);

// Whitespace-separated tokens of `s`.
std::vector<std::string> split_whitespace(const std::string& s);

// `s` split at every `sep`, empty pieces kept (so "a,,b" has an empty middle piece callers can
// reject).
std::vector<std::string> split(const std::string& s, char sep);

// Parses an optionally signed decimal int filling the whole string; false on anything else or
// overflow.
bool parse_int(const std::string& s, int* out);

}  // namespace deepspeed::launcher
