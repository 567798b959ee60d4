// ds_to_universal --input_folder <checkpoint_dir>/<tag> --output_folder <out_dir>/<tag>_universal
//
// Converts a checkpoint (ours, or one Python DeepSpeed wrote, at any ZeRO stage and world size) into DeepSpeed's
// universal layout: each parameter's fp32 weights and optimizer state whole, in a folder of its own
// (src/checkpoint/universal.h), with `latest_universal` beside the output folder. Either engine then loads it at any
// world size or stage with "checkpoint": {"load_universal": true}. The flags are DeepSpeed's ds_to_universal.py's;
// --input_folder may also be a checkpoint directory with a `latest` file.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "checkpoint/universal.h"

int main(int argc, char** argv) {
  std::string input, output;
  CLI::App app{"convert a checkpoint into DeepSpeed's universal checkpoint layout"};
  app.add_option("--input_folder", input, "the checkpoint's tag folder (<dir>/<tag>), or <dir> holding `latest`")
      ->required();
  app.add_option("--output_folder", output, "where to write the universal checkpoint (<dir>/<tag>_universal)")
      ->required();
  CLI11_PARSE(app, argc, argv);
  namespace ckpt = deepspeed::checkpoint;
  try {
    const auto [dir, tag] = ckpt::split_checkpoint_path(input);
    const ckpt::UniversalStats stats = ckpt::write_universal(dir, tag, output);
    std::printf("ds_to_universal: wrote %lld parameters (%.1f MB) from %d rank files to %s\n",
                static_cast<long long>(stats.params), stats.bytes / 1e6, stats.ranks, output.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_to_universal: error: %s\n", e.what());
    return 1;
  }
}
