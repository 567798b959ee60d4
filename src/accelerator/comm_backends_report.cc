// ds_report's "c10d backends" section: which collective backends this LibTorch offers, and ours.
//
// Two sources, both printed so a disagreement is visible: the USE_C10D_<BACKEND> definitions
// Torch's CMake package puts on its targets (INTERFACE_COMPILE_DEFINITIONS of torch_cpu, so every
// target that links LibTorch, this file included, is compiled with them; LibTorch's installed
// headers define none of them), and whether the loaded LibTorch libraries export the backend's
// ProcessGroup class (its typeinfo symbol, found with dlsym).
#include <dlfcn.h>

#include <string>

#include "deepspeed/accelerator.h"
#include "accelerator/env_report.h"

namespace deepspeed {
namespace {

struct Backend {
  const char* name;
  bool compiled;  // USE_C10D_<BACKEND> was defined for this build
  const char* macro;
  const char* klass;      // c10d::ProcessGroup<Backend>
  const char* type_info;  // its mangled typeinfo symbol
  const char* note;       // why it is absent, when it is
};

#ifdef USE_C10D_GLOO
constexpr bool kGloo = true;
#else
constexpr bool kGloo = false;
#endif
#ifdef USE_C10D_NCCL
constexpr bool kNccl = true;
#else
constexpr bool kNccl = false;
#endif
#ifdef USE_C10D_MPI
constexpr bool kMpi = true;
#else
constexpr bool kMpi = false;
#endif
#ifdef USE_C10D_UCC
constexpr bool kUcc = true;
#else
constexpr bool kUcc = false;
#endif

constexpr Backend kBackends[] = {
    {"gloo", kGloo, "USE_C10D_GLOO", "c10d::ProcessGroupGloo", "_ZTIN4c10d16ProcessGroupGlooE", ""},
    {"nccl", kNccl, "USE_C10D_NCCL", "c10d::ProcessGroupNCCL", "_ZTIN4c10d16ProcessGroupNCCLE",
     ", needs a CUDA build of LibTorch"},
    {"mpi", kMpi, "USE_C10D_MPI", "c10d::ProcessGroupMPI", "_ZTIN4c10d15ProcessGroupMPIE", ""},
    {"ucc", kUcc, "USE_C10D_UCC", "c10d::ProcessGroupUCC", "_ZTIN4c10d15ProcessGroupUCCE", ""},
};

std::string describe(const Backend& b) {
  const bool exported = dlsym(RTLD_DEFAULT, b.type_info) != nullptr;
  std::string macro = std::string(b.macro) + (b.compiled ? " defined" : " not defined");
  std::string symbol = std::string(b.klass) + (exported ? " exported" : " not exported");
  if (b.compiled && exported) return "yes (" + macro + ", " + symbol + ")";
  if (!b.compiled && !exported)
    return "no" + std::string(b.note) + " (" + macro + ", " + symbol + ")";
  return "inconsistent: " + macro + " but " + symbol +
         " (headers and library from different builds?)";
}

}  // namespace

ReportSection comm_backends_report() {
  ReportSection section{"c10d backends", {}};
  for (const Backend& b : kBackends) section.lines.emplace_back(b.name, describe(b));
  auto& acc = accelerator::get_accelerator();
  section.lines.emplace_back("deepspeed-cpp uses", acc.communication_backend_name() + " (for the " +
                                                       acc.name() + " accelerator)");
  return section;
}

}  // namespace deepspeed
