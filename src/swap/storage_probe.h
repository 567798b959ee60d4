// Probes of what NVMe offload needs from this machine, for ds_report's "Storage" section: whether
// the kernel lets this process use io_uring (the swapper's I/O engine) and whether a directory's
// file system takes O_DIRECT (without it the swapper falls back to buffered I/O through the page
// cache).
//
// Each probe tries the real operation and reports the kernel's answer; none throws. Thread-safe;
// the O_DIRECT probe creates, and always removes, one small hidden file in the directory it is
// given.
#pragma once

#include <string>

#include "accelerator/env_report.h"

namespace deepspeed::swap {

struct ProbeResult {
  bool ok = false;
  std::string detail;  // what was tried and, on failure, the errno text and a hint

  // "yes (<detail>)" or "no: <detail>"
  std::string str() const { return ok ? "yes (" + detail + ")" : "no: " + detail; }
};

// Sets up a small io_uring and runs one no-op request through it.
ProbeResult probe_io_uring();

// Creates a file in `dir` with O_DIRECT, writes one kAioAlignment-sized aligned block, reads it
// back, compares and removes the file.
ProbeResult probe_o_direct(const std::string& dir);

// The "Storage" section: kernel, io_uring, and for `dir` its file system, free space and O_DIRECT.
// `dir_note` says why this directory was probed (e.g. "current directory"), shown beside it.
ReportSection storage_report(const std::string& dir, const std::string& dir_note);

}  // namespace deepspeed::swap
