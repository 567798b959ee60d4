// ds_check_config --explain KEY | --keys_markdown | --refusals_markdown | --features_markdown | --rules_markdown WHICH
// | --auto_markdown:
// describes a config key, or prints the README's tables of every key and of the refusal rules.
// ds_check_config FILE [--world_size N] [--set KEY=VALUE]... [--hidden_size N]: loads a DeepSpeed
// config, applies the --set overrides (dotted JSON path; the value is JSON if it parses as JSON,
// else a string), resolves "auto" the way initialize() would (batch arithmetic for N
// data-parallel ranks; bucket sizes from --hidden_size; anything else given with --set) and
// prints the resolved config (every default filled) as JSON on stdout. How each "auto" value was
// resolved goes to stderr, one line each. Exit 0 when the config is usable; otherwise one line
// `ds_check_config: <file>: <message>` on stderr and exit 1. Usable means the engines' checks of the config alone
// pass (config::check_config_alone: combinations DeepSpeed refuses, features not built here; by pipe::initialize's
// rules for a pipeline's config), and the LR schedule's params (its constructor's checks, as initialize builds it).
// The engines check more once they see the model and the optimizer's parameters.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "config/feature_gate.h"
#include "config/implemented_values.h"
#include "config/initialize_rules.h"
#include "config/key_catalog.h"
#include "deepspeed/arguments.h"
#include "deepspeed/config.h"
#include "runtime/scheduler_factory.h"

namespace {

// The JSON path of an override ("a.b=1" -> "a.b").
std::string override_path(const std::string& assignment) {
  return assignment.substr(0, assignment.find('='));
}

// Paths that are "auto" in `c`, optimizer and scheduler params included.
std::vector<std::string> auto_paths(const deepspeed::Config& c) {
  std::vector<std::string> paths(c.auto_batch_keys().begin(), c.auto_batch_keys().end());
  paths.insert(paths.end(), c.auto_keys().begin(), c.auto_keys().end());
  if (c.optimizer) {
    for (const auto& [name, value] : c.optimizer->params.values()) {
      if (value.is_auto()) paths.push_back("optimizer.params." + name);
    }
  }
  if (c.scheduler) {
    for (const auto& [name, value] : c.scheduler->params.values()) {
      if (value.is_auto()) paths.push_back("scheduler.params." + name);
    }
  }
  return paths;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Validate a DeepSpeed JSON config and print it with every default filled."};
  std::string file;
  int world_size = 1;
  std::vector<std::string> overrides;
  int64_t hidden_size = 0;
  app.add_option("file", file, "DeepSpeed JSON config (required unless --explain or --keys_markdown)");
  std::string explain;
  app.add_option("--explain", explain,
                 "KEY: describe one config key (dotted path, e.g. zero_optimization.stage): type, default, "
                 "\"auto\", how DeepSpeed reads it and what it does here; no FILE needed");
  bool keys_markdown = false;
  app.add_flag("--keys_markdown", keys_markdown, "print every config key as a Markdown table (the README's)");
  bool features_markdown = false;
  app.add_flag("--features_markdown", features_markdown,
               "print the features refused when the engine starts, as a Markdown table (the README's)");
  std::string rules_markdown;
  app.add_option("--rules_markdown", rules_markdown,
                 "print the gate's combination rules (combinations), pipe::initialize's (pipeline) or the rules that "
                 "need what initialize sees (initialize) as a Markdown table (the README's)")
      ->check(CLI::IsMember({"combinations", "pipeline", "initialize"}));
  bool auto_markdown = false;
  app.add_flag("--auto_markdown", auto_markdown,
               "print what each \"auto\" becomes, as a Markdown table (the README's)");
  bool refusals_markdown = false;
  app.add_flag("--refusals_markdown", refusals_markdown,
               "print the values refused when a config is read, as a Markdown table (the README's)");
  app.add_option("--world_size", world_size, "data-parallel world size for the batch arithmetic")
      ->check(deepspeed::check_at_least(1));  // one readable line, not CLI11's 309-digit bound
  app.add_option("--set", overrides,
                 "KEY=VALUE: set a dotted JSON path before validation (repeatable), e.g. "
                 "--set train_micro_batch_size_per_gpu=4 --set optimizer.params.lr=3e-4")
      ->allow_extra_args(false);
  app.add_option("--hidden_size", hidden_size,
                 "the model's hidden size: fills \"auto\" ZeRO bucket sizes as initialize() does")
      ->check(CLI::Range(int64_t{1}, int64_t{3000000000}));
  int64_t total_num_steps = 0;
  app.add_option("--total_num_steps", total_num_steps,
                 "the run's optimizer steps: fills an \"auto\" scheduler total_num_steps as initialize() does "
                 "from InitializeOptions::total_steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 53));
  std::string model_dtype;
  app.add_option("--model_dtype", model_dtype,
                 "the model's parameters' dtype: fills \"auto\" fp16/bf16.enabled as initialize() does from the "
                 "model (default: neither, the Trainer's default arguments)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  CLI11_PARSE(app, argc, argv);

  if (auto_markdown) {
    std::cout << deepspeed::config::auto_values_markdown();
    return 0;
  }
  if (!rules_markdown.empty()) {
    std::cout << (rules_markdown == "pipeline"     ? deepspeed::config::pipeline_rules_markdown()
                  : rules_markdown == "initialize" ? deepspeed::config::initialize_rules_markdown()
                                                   : deepspeed::config::combination_rules_markdown());
    return 0;
  }
  if (keys_markdown || refusals_markdown || features_markdown) {
    std::cout << (keys_markdown       ? deepspeed::config::key_table_markdown()
                  : refusals_markdown ? deepspeed::config::implemented_values_markdown()
                                      : deepspeed::config::feature_rules_markdown());
    return 0;
  }
  if (!explain.empty()) {
    try {
      std::cout << deepspeed::config::explain_key(explain);
      return 0;
    } catch (const deepspeed::ConfigError& e) {
      std::cerr << "ds_check_config: --explain " << e.what() << "\n";
      return 1;
    }
  }
  if (file.empty()) {
    std::cerr << "ds_check_config: a config FILE is required (or --explain KEY, --keys_markdown)\n";
    return 1;
  }

  try {
    // The file alone says which values are "auto"; the overrides may replace some of them.
    const deepspeed::Config as_written = deepspeed::Config::from_file(file);
    deepspeed::Config config = deepspeed::Config::from_file(file, overrides);
    deepspeed::config::AutoValues known;
    if (hidden_size > 0) known.hidden_size = hidden_size;
    if (total_num_steps > 0) known.total_num_steps = total_num_steps;
    if (!model_dtype.empty())
      known.model_dtype = model_dtype == "bf16"   ? deepspeed::config::DataType::kBf16
                          : model_dtype == "fp16" ? deepspeed::config::DataType::kFp16
                                                  : deepspeed::config::DataType::kFp32;
    // "auto" first (the Trainer's default micro-batch may be what the batch arithmetic needs), then the batch.
    const auto resolved = config.resolve_auto(known);
    config.resolve_batch(world_size);
    deepspeed::config::check_config_alone(config);
    // The scheduler's own params, as initialize() checks them building it (over the optimizer's lr, or DeepSpeed's
    // default 1e-3 when a client optimizer will bring its own).
    if (config.scheduler) {
      const double lr = config.optimizer ? config.optimizer->params.get_number("lr", 1e-3) : 1e-3;
      deepspeed::runtime::make_scheduler_from_config(*config.scheduler, {lr});
    }

    std::vector<std::string> lines;
    for (const std::string& path : auto_paths(as_written)) {
      for (const std::string& o : overrides) {
        if (override_path(o) == path)
          lines.push_back(path + " = " + o.substr(path.size() + 1) + " (--set)");
      }
    }
    for (const std::string& key : as_written.auto_batch_keys()) {
      bool set = false;
      for (const std::string& o : overrides) set = set || override_path(o) == key;
      for (const auto& r : resolved) set = set || r.path == key;  // filled with the Trainer's default
      if (set) continue;
      const int64_t value = key == "train_batch_size" ? *config.train_batch_size
                            : key == "gradient_accumulation_steps"
                                ? *config.gradient_accumulation_steps
                                : *config.train_micro_batch_size_per_gpu;
      lines.push_back(key + " = " + std::to_string(value) + " (batch arithmetic, world size " +
                      std::to_string(world_size) + ")");
    }
    for (const auto& r : resolved) lines.push_back(r.path + " = " + r.value + " (" + r.how + ")");
    for (const std::string& w : config.warnings()) std::cerr << "ds_check_config: warning: " << w << "\n";
    for (const std::string& line : lines) std::cerr << "ds_check_config: \"auto\" " << line << "\n";
    std::cout << config.dump(2) << "\n";
    return 0;
  } catch (const deepspeed::ConfigError& e) {
    std::string message = e.what();
    // I/O and JSON syntax errors already start with the file name; do not repeat it.
    if (message.rfind(file + ":", 0) == 0) {
      std::cerr << "ds_check_config: " << message << "\n";
    } else {
      std::cerr << "ds_check_config: " << file << ": " << message << "\n";
    }
    return 1;
  }
}
