// The library's std::terminate handler (deepspeed/arguments.h): an exception nobody caught ends the
// process with its one-line message and status 1, as an uncaught Python exception ends a DeepSpeed
// rank, instead of libstdc++'s "terminate called after throwing an instance of ..." and SIGABRT.
// Installed when the library is loaded, so it covers errors thrown before any deepspeed call
// returns (a bad config path read from argv); a program's own std::set_terminate replaces it.
#include <errno.h>  // program_invocation_short_name (GNU)

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace deepspeed {
namespace {

std::terminate_handler previous_handler = nullptr;

[[noreturn]] void report_uncaught_exception() {
  const std::exception_ptr current = std::current_exception();
  if (current) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s: error: %s\n", program_invocation_short_name, e.what());
      std::fflush(stderr);
      // No exit(): other threads (c10d's, the swapper's) may still run, and static destructors
      // under them can hang or crash; terminate runs no destructors either.
      std::_Exit(1);
    } catch (...) {
    }
  }
  if (previous_handler != nullptr) previous_handler();
  std::abort();
}

[[maybe_unused]] const bool installed = [] {
  previous_handler = std::set_terminate(report_uncaught_exception);
  return true;
}();

}  // namespace
}  // namespace deepspeed
