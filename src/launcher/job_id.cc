// See job_id.h.
#include "launcher/job_id.h"

#include <random>

namespace deepspeed::launcher {

std::string new_job_id() {
  static const char kHex[] = "0123456789abcdef";
  std::random_device source;  // /dev/urandom (getrandom) in libstdc++
  std::string id;
  for (int i = 0; i < 4; ++i) {
    uint32_t word = source();
    for (int k = 0; k < 8; ++k, word >>= 4) id += kHex[word & 15];
  }
  return id;
}

std::string job_id_for(const LauncherArgs& args, int num_nodes, const std::string& inherited) {
  if (!inherited.empty()) return inherited;
  if (!args.world_info.empty() || (args.no_ssh && num_nodes > 1)) return "";
  return new_job_id();
}

}  // namespace deepspeed::launcher
