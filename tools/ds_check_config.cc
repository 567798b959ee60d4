// ds_check_config FILE [--world_size N]: loads a DeepSpeed JSON config, solves the batch arithmetic
// for N data-parallel ranks and prints the resolved config (every default filled) as JSON.
// Exit 0 when the config is usable; otherwise one line `ds_check_config: <file>: <message>` on
// stderr and exit 1.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "deepspeed/arguments.h"
#include "deepspeed/config.h"

int main(int argc, char** argv) {
  CLI::App app{"Validate a DeepSpeed JSON config and print it with every default filled."};
  std::string file;
  int world_size = 1;
  app.add_option("file", file, "DeepSpeed JSON config")->required();
  app.add_option("--world_size", world_size, "data-parallel world size for the batch arithmetic")
      ->check(deepspeed::check_at_least(1));  // one readable line, not CLI11's 309-digit bound
  CLI11_PARSE(app, argc, argv);

  try {
    deepspeed::Config config = deepspeed::Config::from_file(file);
    config.resolve_batch(world_size);
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
