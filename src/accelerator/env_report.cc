#include "accelerator/env_report.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <link.h>
#include <stdlib.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "deepspeed/accelerator.h"

#ifndef DS_VERSION
#define DS_VERSION "unknown"
#endif

namespace deepspeed {
namespace {

int find_blas(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  base = base ? base + 1 : name;
  if (std::strncmp(base, "libblas", 7) == 0 || std::strncmp(base, "libopenblas", 11) == 0 ||
      std::strncmp(base, "libmkl_rt", 9) == 0) {
    // libblas.so.3 is a symlink chain through /etc/alternatives; the real file says which BLAS it is.
    char* real = realpath(name, nullptr);
    *static_cast<std::string*>(out) = real ? real : name;
    free(real);
    return 1;
  }
  return 0;
}

// The alternatives system hides OpenBLAS behind libblas.so.3; the directory it lives in tells which one it is.
std::string describe_blas(const std::string& path) {
  if (path.empty()) return "unknown (no BLAS library loaded)";
  if (path.find("openblas") != std::string::npos) return path + " (OpenBLAS)";
  if (path.find("mkl") != std::string::npos) return path + (path[0] == '/' ? " (MKL)" : "");
  if (path.find("/blas/") != std::string::npos)
    return path + " (reference BLAS: ~20x slower matmul; install libopenblas0-pthread)";
  return path;
}

std::string cpu_features() {
  std::string out;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) out += "avx512f ";
  if (__builtin_cpu_supports("avx2")) out += "avx2 ";
  if (__builtin_cpu_supports("fma")) out += "fma ";
  if (__builtin_cpu_supports("avx")) out += "avx ";
  if (__builtin_cpu_supports("sse4.2")) out += "sse4.2 ";
  if (out.empty()) return "scalar only";
  out.pop_back();
  return out;
}

// The BLAS LibTorch was built with, from its build settings ("BLAS_INFO=mkl"); "" when they do not say.
std::string builtin_blas() {
  const std::string config = at::show_config();
  const std::string key = "BLAS_INFO=";
  const size_t at_key = config.find(key);
  if (at_key == std::string::npos) return "";
  const size_t begin = at_key + key.size();
  return config.substr(begin, config.find_first_of(", \n", begin) - begin);
}

}  // namespace

std::string loaded_blas_library() {
  std::string path;
  dl_iterate_phdr(find_blas, &path);
  if (!path.empty()) return path;
  // PyPI's LibTorch links MKL statically into libtorch_cpu: no BLAS library of its own is loaded.
  const std::string builtin = builtin_blas();
  return builtin.empty() ? "" : builtin + " (linked into LibTorch)";
}

std::vector<ReportLine> environment_report() {
  auto& acc = accelerator::get_accelerator();
  std::vector<ReportLine> lines;
  lines.emplace_back("deepspeed-cpp version", DS_VERSION);
  lines.emplace_back("torch version", TORCH_VERSION);
  lines.emplace_back("accelerator", acc.name() + " (available: " + accelerator::available_accelerators() + ")");
  lines.emplace_back("communication backend", acc.communication_backend_name());
  lines.emplace_back("BLAS library", describe_blas(loaded_blas_library()));
  lines.emplace_back("intra-op threads", std::to_string(at::get_num_threads()) + " now, " +
                                              std::to_string(accelerator::host_threads_per_rank(1)) +
                                              " cores available to this process");
  lines.emplace_back("CPU SIMD", cpu_features());
  auto mem = acc.memory_stats();
  lines.emplace_back("device memory", std::to_string(mem.total_bytes >> 20) + " MiB total, " +
                                          std::to_string(mem.available_bytes >> 20) + " MiB available");
  return lines;
}

std::string format_report_section(const ReportSection& section) {
  // One column for the values of a section: at least 24 wide, as DeepSpeed's, wider for long names.
  size_t width = 24;
  for (const auto& line : section.lines) width = std::max(width, line.first.size() + 3);
  std::ostringstream os;
  os << section.title << ":\n";
  for (const auto& [name, value] : section.lines) {
    if (name.empty()) {
      os << std::string(width + 2, ' ') << value << "\n";
      continue;
    }
    os << name << " " << std::string(width - name.size(), '.') << " " << value << "\n";
  }
  os << "--------------------------------------------------\n";
  return os.str();
}

std::string format_environment_report() {
  return "--------------------------------------------------\n" +
         format_report_section({"DeepSpeed C++ general environment info", environment_report()});
}

}  // namespace deepspeed
