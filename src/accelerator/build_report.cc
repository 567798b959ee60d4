// ds_report's "Build" section: how this deepspeed-cpp was compiled. src/accelerator/CMakeLists.txt
// passes CMake's view of the build to this one file as DS_BUILD_* definitions, so a new commit
// recompiles nothing else.
#include <string>

#include "accelerator/env_report.h"

#ifndef DS_BUILD_COMPILER
#define DS_BUILD_COMPILER "unknown"
#endif
#ifndef DS_BUILD_TYPE
#define DS_BUILD_TYPE "unknown"
#endif
#ifndef DS_BUILD_FLAGS
#define DS_BUILD_FLAGS ""
#endif
#ifndef DS_BUILD_LAUNCHER
#define DS_BUILD_LAUNCHER ""
#endif
#ifndef DS_BUILD_GIT_COMMIT
#define DS_BUILD_GIT_COMMIT ""
#endif
#ifndef DS_BUILD_CUDA_KERNELS
#define DS_BUILD_CUDA_KERNELS ""
#endif

namespace deepspeed {

ReportSection build_report() {
  ReportSection section{"Build", {}};
  auto& lines = section.lines;
  lines.emplace_back("compiler", DS_BUILD_COMPILER);
  lines.emplace_back("C++ standard", std::to_string(__cplusplus));
  lines.emplace_back("build type", std::string(*DS_BUILD_TYPE ? DS_BUILD_TYPE : "none"));
  lines.emplace_back("compile flags", std::string(*DS_BUILD_FLAGS ? DS_BUILD_FLAGS : "none"));
  lines.emplace_back("compiler launcher",
                     std::string(*DS_BUILD_LAUNCHER ? DS_BUILD_LAUNCHER : "none"));
  lines.emplace_back("fused CUDA optimizer steps",
                     *DS_BUILD_CUDA_KERNELS ? std::string("yes, for sm ") + DS_BUILD_CUDA_KERNELS
                                            : std::string("no (tensor-op steps on GPUs)"));
  lines.emplace_back("git commit",
                     *DS_BUILD_GIT_COMMIT
                         ? std::string(DS_BUILD_GIT_COMMIT) + " (when cmake last configured)"
                         : std::string("unknown (not built from a git checkout)"));
  return section;
}

}  // namespace deepspeed
