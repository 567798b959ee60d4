// ds_report [--path DIR]: prints the environment deepspeed-cpp runs in (paste it into bug reports): versions,
// accelerator, BLAS, LibTorch's build, the c10d backends, threads, which SIMD variant each fused kernel runs here,
// what NVMe offload gets from the kernel and from DIR's file system (io_uring, O_DIRECT), and how this build was
// compiled.
//
// DIR defaults to the current directory (where a relative nvme_path would land). Bad command line or a DIR that
// is not a directory: one line `ds_report: <message>` on stderr and exit 2.
#include <deepspeed/comm.h>
#include "accelerator/env_report.h"
#include <deepspeed/ops.h>
#include "swap/storage_probe.h"

#include <CLI/CLI.hpp>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>

int main(int argc, char** argv) {
  CLI::App app{"Print the environment deepspeed-cpp runs in (versions, backends, threads, kernels, storage)."};
  std::string path;
  app.add_option("--path", path,
                 "directory to probe for O_DIRECT (where offload_*.nvme_path points); default: the current "
                 "directory");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "ds_report: " << e.what() << " (see --help)\n";
    return 2;
  }

  std::string note = "given by --path";
  if (path.empty()) {
    path = ".";
    note = "current directory; --path DIR probes another";
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    std::cerr << "ds_report: --path " << path << ": "
              << (std::filesystem::exists(path, ec) ? "not a directory" : "no such directory") << "\n";
    return 2;
  }

  std::cout << deepspeed::format_environment_report();
  std::cout << deepspeed::format_report_section(deepspeed::libtorch_report());
  std::cout << deepspeed::format_report_section(deepspeed::gpu_report());
  std::cout << deepspeed::format_report_section(deepspeed::comm_backends_report());
  // What the backend does natively and what runs through a fallback (probed on a private one-rank group).
  // A bad DS_COMM_* variable is reported in its section; the rest of the report still prints.
  try {
    const deepspeed::comm::BackendCapabilities caps = deepspeed::comm::backend_capabilities();
    std::cout << deepspeed::format_report_section({"collectives", {{caps.backend, caps.describe()}}});
  } catch (const std::exception& e) {
    std::cout << deepspeed::format_report_section({"collectives", {{"error", e.what()}}});
  }
  std::cout << deepspeed::format_report_section(deepspeed::threads_report());
  std::cout << "fused CPU optimizer kernels (DS_SIMD=scalar|avx2|avx512 forces a variant):\n";
  for (const auto& line : deepspeed::ops::kernel_report()) std::cout << "  " << line << "\n";
  std::cout << "--------------------------------------------------\n";
  std::cout << deepspeed::format_report_section(deepspeed::swap::storage_report(path, note));
  std::cout << deepspeed::format_report_section(deepspeed::build_report());
  return 0;
}
