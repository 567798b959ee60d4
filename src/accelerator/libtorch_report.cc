// ds_report's "LibTorch" section: which LibTorch this process loaded and how it was built.
#include <ATen/Version.h>
#include <link.h>
#include <stdlib.h>
#include <torch/csrc/api/include/torch/version.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "accelerator/env_report.h"

namespace deepspeed {
namespace {

// Build settings longer than this are wrapped onto continuation lines.
constexpr size_t kWrapColumn = 88;

int find_libtorch(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  base = base ? base + 1 : name;
  if (std::strncmp(base, "libtorch_cpu.so", 15) != 0) return 0;
  char* real = realpath(name, nullptr);
  *static_cast<std::string*>(out) = real ? real : name;
  free(real);
  return 1;
}

std::string loaded_libtorch() {
  std::string path;
  dl_iterate_phdr(find_libtorch, &path);
  return path.empty() ? "unknown (libtorch_cpu.so not found among the loaded libraries)" : path;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// "A=1, B=2, CXX_FLAGS=-O2 -g, ..." split on ", "; CXX_FLAGS (a page of warning flags) and
// TORCH_VERSION (printed above) are left out.
std::vector<std::string> build_settings(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = text.find(", ", pos);
    if (next == std::string::npos) next = text.size();
    std::string item = trim(text.substr(pos, next - pos));
    pos = next + 2;
    while (!item.empty() && item.back() == ',') item.pop_back();  // the list ends with ", "
    if (item.empty() || item.rfind("CXX_FLAGS=", 0) == 0 || item.rfind("TORCH_VERSION=", 0) == 0)
      continue;
    out.push_back(item);
  }
  return out;
}

// Appends `items` as one "name .... a, b, c" line wrapped onto continuation lines.
void add_wrapped(std::vector<ReportLine>& lines, const std::string& name,
                 const std::vector<std::string>& items) {
  std::string row;
  bool first = true;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string piece = items[i] + (i + 1 < items.size() ? "," : "");
    if (!row.empty() && row.size() + 1 + piece.size() > kWrapColumn) {
      lines.emplace_back(first ? name : "", row);
      first = false;
      row.clear();
    }
    row += (row.empty() ? "" : " ") + piece;
  }
  if (!row.empty() || first)
    lines.emplace_back(first ? name : "", row.empty() ? "none reported" : row);
}

}  // namespace

ReportSection libtorch_report() {
  ReportSection section{"LibTorch", {}};
  auto& lines = section.lines;
  lines.emplace_back("torch version", TORCH_VERSION);
  lines.emplace_back("library", loaded_libtorch());
  // TorchConfig.cmake makes every user compile with LibTorch's own ABI; a mismatch would not link.
  lines.emplace_back("C++11 ABI", _GLIBCXX_USE_CXX11_ABI ? "yes (_GLIBCXX_USE_CXX11_ABI=1)"
                                                         : "no (_GLIBCXX_USE_CXX11_ABI=0)");

  // at::show_config(): "PyTorch built with:" then "  - <fact>" lines, one of them "Build settings:
  // A=1, B=2, ...".
  std::istringstream config(at::show_config());
  std::vector<std::string> facts;
  std::vector<std::string> settings;
  for (std::string line; std::getline(config, line);) {
    line = trim(line);
    if (line.rfind("- ", 0) != 0) continue;
    line = line.substr(2);
    if (line.rfind("Build settings:", 0) == 0) {
      settings = build_settings(line.substr(std::strlen("Build settings:")));
    } else {
      facts.push_back(line);
    }
  }
  for (size_t i = 0; i < facts.size(); ++i)
    lines.emplace_back(i == 0 ? "built with" : "", facts[i]);
  add_wrapped(lines, "build settings", settings);
  return section;
}

}  // namespace deepspeed
