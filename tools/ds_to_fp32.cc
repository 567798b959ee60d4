// ds_to_fp32 <checkpoint_dir> [tag] <output.safetensors|output.pt>
// ds_to_fp32 <checkpoint_dir> [tag] <output_dir> --hf <config.json>
//
// Merges the ZeRO fp32 partitions of every data-parallel rank of a checkpoint (the tag in
// <dir>/latest when no tag is given) into one full fp32 state dict, as DeepSpeed's zero_to_fp32.py
// does: in safetensors format, or torch.save's (*.pt, *.pth, *.bin), by the output's extension.
// Rank files are mapped; safetensors output streams one parameter at a time, so memory stays bounded
// by the largest parameter (torch output holds the parameters that straddle partitions at once).
// --hf CONFIG: write a Hugging Face folder instead: <output_dir>/model.safetensors and the model's config.json beside
// it (its dtype set to float32), which transformers' from_pretrained loads when the parameter names are transformers'
// (deepspeed/models/llama.h's are).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepspeed/checkpoint.h"
#include "deepspeed/models/hf_checkpoint.h"

namespace {

constexpr char kUsage[] =
    "usage: ds_to_fp32 <checkpoint_dir> [tag] <output.safetensors|output.pt>\n"
    "       ds_to_fp32 <checkpoint_dir> [tag] <output_dir> --hf <config.json>\n"
    "  merges the fp32 ZeRO partitions of <checkpoint_dir>/<tag> (default: the tag in "
    "<checkpoint_dir>/latest) into one safetensors file, or a torch.save file when the output ends in .pt, .pth "
    "or .bin; with --hf, into <output_dir>/model.safetensors beside the model's config.json (a Hugging Face folder)\n";

}  // namespace

int main(int argc, char** argv) {
  // --help is a request: usage on stdout, exit 0. A wrong argument count is an error: usage on
  // stderr, exit 2 (as argparse does for zero_to_fp32.py).
  if (argc >= 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<std::string> args;
  std::string hf_config;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--hf" && i + 1 < argc) {
      hf_config = argv[++i];
    } else if (std::string(argv[i]) == "--hf") {
      std::fputs("ds_to_fp32: error: --hf needs the model's config.json\n", stderr);
      return 2;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (args.size() < 2 || args.size() > 3) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string dir = args[0];
  const std::string tag = args.size() == 3 ? args[1] : "";
  const std::string target = args.back();
  const std::string out = hf_config.empty() ? target : target + "/model.safetensors";
  try {
    std::string config_text;
    if (!hf_config.empty()) {
      std::ifstream in(hf_config);
      if (!in) throw std::runtime_error(hf_config + ": cannot read the model's config.json");
      std::ostringstream text;
      text << in.rdbuf();
      config_text = text.str();
      std::filesystem::create_directories(target);
    }
    deepspeed::checkpoint::ConsolidateStats stats =
        deepspeed::checkpoint::consolidate_fp32(dir, tag, out);
    std::printf("ds_to_fp32: wrote %lld tensors (%.1f MB, largest %.1f MB) from %d ranks to %s\n",
                static_cast<long long>(stats.tensors), stats.bytes / 1e6,
                stats.largest_tensor_bytes / 1e6, stats.ranks, out.c_str());
    if (!hf_config.empty()) deepspeed::models::write_hf_index(target, 1, config_text);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_to_fp32: error: %s\n", e.what());
    return 1;
  }
}
