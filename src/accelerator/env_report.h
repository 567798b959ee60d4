// What `ds_report` prints: the versions, accelerator, collective backends, BLAS and CPU features this process sees,
// and how LibTorch and deepspeed-cpp were built. Users paste it into bug reports, so every line is something that
// changes behaviour or speed. The NVMe storage probes live in swap/storage_probe.h.
// Every function here only reads the process's state (no side effects), and may be called from any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace deepspeed {

// One "name .... value" line of the report.
using ReportLine = std::pair<std::string, std::string>;

// The loaded BLAS library as the dynamic linker resolved it (path of libblas / libopenblas / MKL in this process),
// or "unknown". Debian's reference BLAS is ~20x slower than OpenBLAS for LibTorch's matmul, so this matters.
std::string loaded_blas_library();

// The report's lines, in order.
std::vector<ReportLine> environment_report();

// The report as text, formatted like DeepSpeed's ds_report.
std::string format_environment_report();

// A titled group of report lines. A line with an empty name continues the value of the line above (printed
// indented), for values too long for one line.
struct ReportSection {
  std::string title;
  std::vector<ReportLine> lines;
};

// "<title>:", one "name ...... value" line per entry (names padded to one column), then a rule of dashes.
std::string format_report_section(const ReportSection& section);

// "LibTorch": version, the library loaded, C++11 ABI, OpenMP / MKL-DNN versions and the build settings LibTorch
// reports (at::show_config()), trimmed to what changes behaviour.
ReportSection libtorch_report();

// "c10d backends": gloo, nccl, mpi, ucc, each with whether this LibTorch has it (the USE_C10D_* definitions that
// Torch's CMake package hands to its users, cross-checked against the ProcessGroup classes the loaded LibTorch
// exports), and the backend deepspeed-cpp uses on this accelerator.
ReportSection comm_backends_report();

// "GPU": whether LibTorch has CUDA and which runtime, the driver's CUDA version, NCCL's version, the visible
// devices (CUDA_VISIBLE_DEVICES) with name, compute capability and memory.
ReportSection gpu_report();

// "OpenMP": LibTorch's intra-/inter-op threads, OpenMP's max threads, what the engine will set, and the environment
// variables that change them.
ReportSection threads_report();

// "Build": compiler, build type and flags, compiler launcher (ccache), deepspeed-cpp git commit, all as CMake saw
// them when it configured this build.
ReportSection build_report();

}  // namespace deepspeed
