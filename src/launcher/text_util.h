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

// A host name (or address) safe on ssh, pdsh and mpirun command lines: letters, digits and
// . - _ : @, not starting with '-' (it would read as an option; pdsh's -w takes '-' as "exclude")
// and free of pdsh's hostlist syntax (, [ ]) and shell characters.
bool is_valid_host_name(const std::string& host);
inline constexpr char kHostNameRule[] =
    "host names may hold letters, digits and . - _ : @ and must not start with '-'";

// `s` as one word for a POSIX shell: single-quoted, with each ' written as '\''. Nothing inside is
// expanded by the shell that reads it (remote commands built by the multi-node runners).
std::string sh_quote(const std::string& s);

// Splits `s` into words as a POSIX shell would without expanding anything: whitespace separates,
// '...' and "..." group (inside "...", a backslash escapes " \ $ and `), a backslash outside
// quotes escapes the next character. Throws LaunchError naming `what` on an unterminated quote.
std::vector<std::string> split_shell_words(const std::string& s, const std::string& what);

}  // namespace deepspeed::launcher
