// See command_line.h.
#include "autotuning/command_line.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "deepspeed/error.h"

namespace deepspeed::autotuning {

ConfigArg find_config_arg(const std::vector<std::string>& args) {
  static const std::string kFlag = "--deepspeed_config";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == kFlag && i + 1 < args.size()) return {i + 1, false, args[i + 1]};
    if (args[i].rfind(kFlag + "=", 0) == 0) return {i, true, args[i].substr(kFlag.size() + 1)};
  }
  throw Error(
      "--autotuning needs the program's DeepSpeed config: pass it as --deepspeed_config PATH "
      "(the autotuner replaces it with each trial's config)");
}

std::vector<std::string> with_config(const std::vector<std::string>& args, const ConfigArg& where,
                                     const std::string& path) {
  std::vector<std::string> out = args;
  out.at(where.index) = where.inline_value ? "--deepspeed_config=" + path : path;
  return out;
}

std::vector<std::string> apply_arg_mappings(std::vector<std::string> args,
                                            const std::map<std::string, std::string>& mappings,
                                            const nlohmann::ordered_json& config) {
  for (const auto& [key, flag] : mappings) {
    DS_CHECK_T(ConfigError, config.contains(key) && !config[key].is_object(),
               "autotuning.arg_mappings.", key, ": the trial config has no top-level value '", key,
               "' to pass as ", flag);
    const std::string value =
        config[key].is_string() ? config[key].get<std::string>() : config[key].dump();
    bool found = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == flag && i + 1 < args.size()) {
        args[i + 1] = value;
        found = true;
      } else if (args[i].rfind(flag + "=", 0) == 0) {
        args[i] = flag + "=" + value;
        found = true;
      }
    }
    if (!found) {
      args.push_back(flag);
      args.push_back(value);
    }
  }
  return args;
}

std::vector<std::string> launcher_flags_without_autotuning(const std::vector<std::string>& argv,
                                                           size_t num_program_args) {
  DS_CHECK(argv.size() >= num_program_args + 2, "command line too short");
  const size_t end = argv.size() - num_program_args - 1;  // the program's position
  std::vector<std::string> flags;
  for (size_t i = 1; i < end; ++i) {
    if (argv[i] == "--autotuning") {
      ++i;  // and its value
      continue;
    }
    if (argv[i].rfind("--autotuning=", 0) == 0) continue;
    flags.push_back(argv[i]);
  }
  return flags;
}

int64_t parse_bytes(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  double scale = 1;
  const std::string suffix = end != nullptr ? std::string(end) : "";
  if (suffix == "K" || suffix == "k") scale = 1024.0;
  if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  const double bytes = v * scale;
  DS_CHECK(end != text.c_str() && std::isfinite(v) && (suffix.empty() || scale != 1) &&
               bytes >= 1 && bytes <= 1e18,
           what, "='", text,
           "' must be a number of bytes from 1 to 1e18 (K, M, G suffixes allowed)");
  return static_cast<int64_t>(bytes);
}

}  // namespace deepspeed::autotuning
