// The command lines of the autotuner's runs: the user's `deepspeed` command with --autotuning
// removed, the program's --deepspeed_config pointed at a trial's config, and
// autotuning.arg_mappings applied (DeepSpeed's way to tell a program that takes its batch size as
// its own flag). Pure functions; thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deepspeed::autotuning {

// Where the program's config path is: the index in `program_args` of the value of
// `--deepspeed_config PATH` or of `--deepspeed_config=PATH` (then `inline_value` is true). Throws
// deepspeed::Error when the program is not given one.
struct ConfigArg {
  size_t index = 0;
  bool inline_value = false;
  std::string path;
};
ConfigArg find_config_arg(const std::vector<std::string>& program_args);

// `program_args` with the config path replaced by `path`.
std::vector<std::string> with_config(const std::vector<std::string>& program_args,
                                     const ConfigArg& where, const std::string& path);

// Sets each mapped program flag (`--flag V` or `--flag=V`, appended when absent) to the value of
// the config key it maps from (a top-level key of `config`, e.g. train_micro_batch_size_per_gpu).
// Throws deepspeed::ConfigError naming autotuning.arg_mappings.<key> for a key the config lacks.
std::vector<std::string> apply_arg_mappings(std::vector<std::string> program_args,
                                            const std::map<std::string, std::string>& mappings,
                                            const nlohmann::ordered_json& config);

// The launcher flags of `argv` (argv[0] the deepspeed command, then flags, then the program and
// its `num_program_args` arguments) without --autotuning and its value.
std::vector<std::string> launcher_flags_without_autotuning(const std::vector<std::string>& argv,
                                                           size_t num_program_args);

// "12G", "512M", "1048576": bytes. Throws deepspeed::Error naming `what` otherwise.
int64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace deepspeed::autotuning
