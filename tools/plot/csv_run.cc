#include "plot/csv_run.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace deepspeed::plot {
namespace {

constexpr const char* kPrefix = "Train_Samples_";
constexpr const char* kSuffix = ".csv";

// The line as it appears in an error message: long lines cut, so the message stays one readable
// line.
std::string shown(const std::string& line) {
  return "'" + (line.size() > 60 ? line.substr(0, 60) + "..." : line) + "'";
}

bool parse_step(const std::string& text) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && *end == '\0' && v >= 0;
}

// Any number strtod reads whole, nan and inf included (%.17g writes those).
bool parse_value(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return *end == '\0';
}

}  // namespace

std::map<std::string, std::string> find_metrics(const std::string& run_dir) {
  std::map<std::string, std::string> metrics;
  std::error_code ec;
  std::filesystem::directory_iterator it(run_dir, ec);
  if (ec) throw PlotError("cannot list " + run_dir + ": " + ec.message());
  const size_t prefix = std::strlen(kPrefix), suffix = std::strlen(kSuffix);
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix + suffix || name.compare(0, prefix, kPrefix) != 0 ||
        name.compare(name.size() - suffix, suffix, kSuffix) != 0) {
      continue;
    }
    metrics[name.substr(prefix, name.size() - prefix - suffix)] = it->path().string();
  }
  if (ec) throw PlotError("cannot list " + run_dir + ": " + ec.message());
  return metrics;
}

size_t check_metric_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw PlotError("cannot read " + path + ": " + std::strerror(errno));
  std::string line;
  size_t line_no = 0, rows = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t comma = line.find(',');
    const bool two_fields =
        comma != std::string::npos && line.find(',', comma + 1) == std::string::npos;
    const std::string first = two_fields ? line.substr(0, comma) : "";
    const std::string second = two_fields ? line.substr(comma + 1) : "";
    if (line_no == 1) {
      if (!two_fields || first != "step" || second.empty()) {
        throw PlotError(path + ":1: expected the header 'step,<metric>', got " + shown(line));
      }
      continue;
    }
    if (!two_fields || !parse_step(first) || !parse_value(second)) {
      throw PlotError(path + ":" + std::to_string(line_no) +
                      ": expected '<samples>,<value>', got " + shown(line));
    }
    ++rows;
  }
  if (in.bad()) throw PlotError("cannot read " + path + ": " + std::strerror(errno));
  if (line_no == 0) throw PlotError(path + ": empty file (expected the header 'step,<metric>')");
  if (rows == 0) throw PlotError(path + ": no data rows after the header");
  return rows;
}

}  // namespace deepspeed::plot
