// What `ds_report` prints: the versions, accelerator, collective backends, BLAS and CPU features this process sees.
// Users paste it into bug reports, so every line is something that changes behaviour or speed.
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

}  // namespace deepspeed
