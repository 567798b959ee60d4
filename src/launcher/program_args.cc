// deepspeed/arguments.h: strip_launcher_args (the rank's side of the launcher's --local_rank) and
// the readable bounds checks for CLI11 options.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "deepspeed/arguments.h"

namespace deepspeed {
namespace {

constexpr char kFlag[] = "--local_rank";

// Whether `s` is a rank number (into *out). When it is not, the flag is left in place for the
// program's own parser to report.
bool parse_rank(const char* s, int* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > (1 << 20)) return false;
  *out = static_cast<int>(v);
  return true;
}

// How many arguments starting at args[i] are the launcher's (0, 1 or 2), and the rank they carry.
template <typename Get>
int launcher_arg_width(size_t i, size_t n, const Get& get, int* rank) {
  const char* a = get(i);
  const size_t len = sizeof(kFlag) - 1;
  if (std::strncmp(a, kFlag, len) != 0) return 0;
  if (a[len] == '=') return parse_rank(a + len + 1, rank) ? 1 : 0;
  if (a[len] == '\0' && i + 1 < n) return parse_rank(get(i + 1), rank) ? 2 : 0;
  return 0;
}

// A bound as a user would write it: integers in full ("1048576", not "1.04858e+06").
std::string format_bound(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

// The option's text as a number; false when it is not one.
bool parse_number(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(text.c_str(), &end);
  return errno == 0 && *end == '\0' && !std::isnan(*out);
}

}  // namespace

ArgumentCheck check_at_least(double lo) {
  return [lo](const std::string& text) -> std::string {
    double v = 0;
    if (!parse_number(text, &v)) return "expected a number, got '" + text + "'";
    if (v < lo) return "must be >= " + format_bound(lo) + ", got " + text;
    return "";
  };
}

ArgumentCheck check_in_range(double lo, double hi) {
  return [lo, hi](const std::string& text) -> std::string {
    double v = 0;
    if (!parse_number(text, &v)) return "expected a number, got '" + text + "'";
    if (v < lo || v > hi) {
      return "must be in [" + format_bound(lo) + ", " + format_bound(hi) + "], got " + text;
    }
    return "";
  };
}

int strip_launcher_args(int& argc, char** argv) {
  int rank = -1;
  int out = argc > 0 ? 1 : 0;  // argv[0] is the program
  const size_t n = static_cast<size_t>(argc);
  auto get = [argv](size_t k) { return static_cast<const char*>(argv[k]); };
  bool after_dashes = false;
  for (size_t i = static_cast<size_t>(out); i < n;) {
    const int width = after_dashes ? 0 : launcher_arg_width(i, n, get, &rank);
    if (width > 0) {
      i += static_cast<size_t>(width);
      continue;
    }
    if (std::strcmp(argv[i], "--") == 0) after_dashes = true;
    argv[out++] = argv[i++];
  }
  argc = out;
  argv[argc] = nullptr;
  return rank;
}

int strip_launcher_args(std::vector<std::string>& args) {
  int rank = -1;
  std::vector<std::string> kept;
  auto get = [&args](size_t k) { return args[k].c_str(); };
  bool after_dashes = false;
  for (size_t i = 0; i < args.size();) {
    // Element 0 may be the program or the first argument: both are checked alike, since a
    // program path never reads "--local_rank".
    const int width = after_dashes ? 0 : launcher_arg_width(i, args.size(), get, &rank);
    if (width > 0) {
      i += static_cast<size_t>(width);
      continue;
    }
    if (args[i] == "--") after_dashes = true;
    kept.push_back(args[i++]);
  }
  args = std::move(kept);
  return rank;
}

}  // namespace deepspeed
