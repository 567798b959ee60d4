// Did-you-mean suggestions for unknown keys, parameter names and enum values.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace deepspeed::config {

// Levenshtein distance (insert, delete, substitute each cost 1).
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` (case-insensitively) when it is close enough to be a likely typo,
// else "". Close enough: at most max(2, len/3) edits, so short words do not match everything.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

std::string to_lower(std::string s);

// "a, b, c"
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace deepspeed::config
