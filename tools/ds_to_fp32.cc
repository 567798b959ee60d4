// ds_to_fp32 <checkpoint_dir> [tag] <output.safetensors|output.pt>
//
// Merges the ZeRO fp32 partitions of every data-parallel rank of a checkpoint (the tag in
// <dir>/latest when no tag is given) into one full fp32 state dict, as DeepSpeed's zero_to_fp32.py
// does: in safetensors format, or torch.save's (*.pt, *.pth, *.bin), by the output's extension.
// Rank files are mapped; safetensors output streams one parameter at a time, so memory stays bounded
// by the largest parameter (torch output holds the parameters that straddle partitions at once).
#include <cstdio>
#include <exception>
#include <string>

#include "deepspeed/checkpoint.h"

namespace {

constexpr char kUsage[] =
    "usage: ds_to_fp32 <checkpoint_dir> [tag] <output.safetensors|output.pt>\n"
    "  merges the fp32 ZeRO partitions of <checkpoint_dir>/<tag> (default: the tag in "
    "<checkpoint_dir>/latest) into one safetensors file, or a torch.save file when the output ends in .pt, .pth "
    "or .bin\n";

}  // namespace

int main(int argc, char** argv) {
  // --help is a request: usage on stdout, exit 0. A wrong argument count is an error: usage on
  // stderr, exit 2 (as argparse does for zero_to_fp32.py).
  if (argc >= 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc < 3 || argc > 4) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string dir = argv[1];
  std::string tag = argc == 4 ? argv[2] : "";
  std::string out = argv[argc - 1];
  try {
    deepspeed::checkpoint::ConsolidateStats stats =
        deepspeed::checkpoint::consolidate_fp32(dir, tag, out);
    std::printf("ds_to_fp32: wrote %lld tensors (%.1f MB, largest %.1f MB) from %d ranks to %s\n",
                static_cast<long long>(stats.tensors), stats.bytes / 1e6,
                stats.largest_tensor_bytes / 1e6, stats.ranks, out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_to_fp32: error: %s\n", e.what());
    return 1;
  }
}
