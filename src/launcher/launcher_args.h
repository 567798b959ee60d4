// The `deepspeed` command line (DeepSpeed runner.py's flags and defaults) built on CLI11; private
// to the launcher. parse_args() in the public header is the entry point; this header adds the two
// outcomes main() must tell apart from other LaunchErrors: a help request (exit 0) and a usage
// error (exit 2, as argparse and CLI11 do).
#pragma once

#include <string>

#include "launcher/launcher.h"

namespace deepspeed::launcher {

// -h/--help was given; what() is the help text to print.
class HelpRequested : public Error {
 public:
  using Error::Error;
};

// The command line itself is wrong (unknown or malformed flag, missing program, unsupported flag).
class UsageError : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

}  // namespace deepspeed::launcher
