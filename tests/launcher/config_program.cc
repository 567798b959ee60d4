// A user's training program in its simplest form, for the launcher's argument tests: it reads its
// DeepSpeed config path from argv[1] after removing the launcher's --local_rank, and catches
// nothing, so a bad config shows what the library's terminate handler prints. Given "--cli11" it
// parses its command line with add_config_arguments instead.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "deepspeed/arguments.h"
#include "deepspeed/config.h"

namespace {

void print_config(const std::string& path, int local_rank) {
  const deepspeed::Config config = deepspeed::Config::from_file(path);  // not caught, on purpose
  std::printf("config ok: zero stage %d, local_rank %d\n", config.zero.stage, local_rank);
}

bool has_flag(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == flag) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (has_flag(argc, argv, "--cli11")) {
    CLI::App app{"config_program"};
    deepspeed::ConfigArguments ds;
    deepspeed::add_config_arguments(app, ds)->get_option("--deepspeed_config")->required();
    app.add_flag("--cli11");
    CLI11_PARSE(app, argc, argv);
    print_config(ds.deepspeed_config, ds.local_rank);
    return 0;
  }
  const int local_rank = deepspeed::strip_launcher_args(argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: config_program <ds_config.json>\n");
    return 2;
  }
  print_config(argv[1], local_rank);
  return 0;
}
