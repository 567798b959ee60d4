// ds_to_deepspeed --input_folder <checkpoint_dir>/<tag> --output_folder <out_dir>/<tag> [--world_size N]
//                 [--zero_stage S] [--add_prefix P] [--elastic_checkpoint true|false]
//
// Writes a checkpoint (ours, or Python DeepSpeed's at another world size or stage) in Python DeepSpeed's own layout
// (src/checkpoint/deepspeed_export.h), with `latest` beside the output folder naming it: DeepSpeed's
// engine.load_checkpoint(<out_dir>) then resumes training from it at `world_size` data-parallel ranks and ZeRO stage
// `zero_stage` (both default to the checkpoint's own), and its zero_to_fp32.py reads it. --add_prefix prepends P
// to every parameter and buffer name (a Python model that wraps ours: "module."). --elastic_checkpoint: the optimizer
// state of stages 1-2 in DeepSpeed's elastic form or not (default: the saved config's zero_optimization key).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "checkpoint/deepspeed_export.h"

int main(int argc, char** argv) {
  std::string input, output, prefix;
  int world_size = 0, zero_stage = -1;
  CLI::App app{"write a checkpoint in Python DeepSpeed's own layout"};
  app.add_option("--input_folder", input, "the checkpoint's tag folder (<dir>/<tag>), or <dir> holding `latest`")
      ->required();
  app.add_option("--output_folder", output, "the tag folder to write (<out_dir>/<tag>)")->required();
  app.add_option("--world_size", world_size, "data-parallel ranks DeepSpeed resumes with (default: as saved)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--zero_stage", zero_stage, "ZeRO stage DeepSpeed resumes with (default: as saved)")
      ->check(CLI::Range(0, 3));
  app.add_option("--add_prefix", prefix, "prepended to every parameter and buffer name");
  std::optional<bool> elastic;
  app.add_option("--elastic_checkpoint", elastic,
                 "stages 1-2: the optimizer state in DeepSpeed's elastic form (default: as the saved config says)");
  CLI11_PARSE(app, argc, argv);
  namespace ckpt = deepspeed::checkpoint;
  try {
    const auto [dir, tag] = ckpt::split_checkpoint_path(input);
    ckpt::DeepSpeedExportOptions options;
    if (world_size > 0) options.world_size = world_size;
    if (zero_stage >= 0) options.zero_stage = zero_stage;
    options.elastic = elastic;
    if (!prefix.empty()) options.name_map = [prefix](const std::string& name) { return prefix + name; };
    const ckpt::DeepSpeedExportStats stats = ckpt::write_deepspeed_tag(dir, tag, output, options);
    if (elastic.value_or(false) && !stats.elastic)
      std::fprintf(stderr, "ds_to_deepspeed: note: --elastic_checkpoint true applies to ZeRO stages 1-2 (and not to "
                           "stage 1 with bf16 and fp32 gradient accumulation, whose files DeepSpeed keeps rigid); "
                           "these files are rigid\n");
    std::printf("ds_to_deepspeed: wrote %lld parameters (%.1f MB) for %d rank(s) to %s\n",
                static_cast<long long>(stats.params), stats.bytes / 1e6, std::max(stats.ranks, 1), output.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_to_deepspeed: error: %s\n", e.what());
    return 1;
  }
}
