// What a training program started by the `deepspeed` launcher needs from its command line.
//
// The launcher starts every rank as `<program> --local_rank=<N> <your arguments...>`, as
// DeepSpeed's does (LOCAL_RANK is also in the environment, and is what the library reads). A
// program must therefore either accept that flag or remove it before reading its own arguments:
//
//   int main(int argc, char** argv) {                    // argv[1] is the config path
//     deepspeed::strip_launcher_args(argc, argv);        // drops --local_rank=N / --local_rank N
//     auto config = deepspeed::Config::from_file(argv[1]);
//
//   CLI::App app{"my trainer"};                          // or, with CLI11:
//   deepspeed::ConfigArguments ds;
//   deepspeed::add_config_arguments(app, ds);            // --deepspeed[_config], --local_rank
//   CLI11_PARSE(app, argc, argv);
//   auto config = deepspeed::Config::from_file(ds.deepspeed_config);
//
// Uncaught errors: linking the library installs a std::terminate handler (at load time, before
// main) that prints an exception escaping main() or a thread as one line,
// `<program>: error: <what()>`, and exits with status 1 instead of "terminate called after throwing
// an instance of ..." and SIGABRT. A program that calls std::set_terminate itself keeps its own
// handler; terminate without an exception (or with one that is not a std::exception) goes to the
// handler that was there before (the default aborts).
//
// Thread safety: these are for main(), before threads start (the checks may run anywhere).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace deepspeed {

// Removes the launcher's `--local_rank=<N>` and `--local_rank <N>` (N an integer) from argv in
// place, before any "--"; argc shrinks and argv[argc] stays nullptr. Returns the last N removed,
// or -1 when there was none. Other arguments keep their order.
int strip_launcher_args(int& argc, char** argv);

// The same for an argument list, with or without the program name first.
int strip_launcher_args(std::vector<std::string>& args);

// Bounds checks for CLI11's Option::check that say what is wrong in one readable line, where
// CLI::PositiveNumber and CLI::Range print the type's 309-digit maximum:
//   app.add_option("--steps", steps)->check(deepspeed::check_at_least(1));
//   // --steps 0:   "--steps: must be >= 1, got 0"
//   // --steps abc: "--steps: expected a number, got 'abc'"
// Each returns "" when the value is a number within the bounds (inclusive), else the message.
using ArgumentCheck = std::function<std::string(const std::string&)>;
ArgumentCheck check_at_least(double lo);
ArgumentCheck check_in_range(double lo, double hi);

// What add_config_arguments fills.
struct ConfigArguments {
  bool deepspeed = false;        // --deepspeed (or deprecated --deepscale): a flag for user code
  std::string deepspeed_config;  // --deepspeed_config (or the deprecated --deepscale_config)
  int local_rank = -1;           // --local_rank, set by the launcher; -1 when not given
};

// DeepSpeed's deepspeed.add_config_arguments(parser) for a CLI11 app: adds a "DeepSpeed" option
// group with --deepspeed, --deepspeed_config and their deprecated --deepscale spellings, and,
// unlike Python (where the user adds it), --local_rank, which the launcher always passes. Returns
// the group, e.g. to make --deepspeed_config required:
//   deepspeed::add_config_arguments(app, ds)->get_option("--deepspeed_config")->required();
// A template over the app type so this header does not include CLI11 (nor tie the library to its
// version): call it with a CLI::App.
template <typename App>
auto* add_config_arguments(App& app, ConfigArguments& args) {
  auto* group = app.add_option_group("DeepSpeed", "DeepSpeed configurations");
  group->add_flag(
      "--deepspeed,--deepscale", args.deepspeed,
      "Enable DeepSpeed (helper flag for user code, no effect on the DeepSpeed backend; "
      "--deepscale is deprecated)");
  group->add_option("--deepspeed_config,--deepscale_config", args.deepspeed_config,
                    "DeepSpeed json configuration file (--deepscale_config is deprecated)");
  group->add_option("--local_rank", args.local_rank,
                    "local rank, passed by the launcher (the library reads LOCAL_RANK)");
  return group;
}

}  // namespace deepspeed
