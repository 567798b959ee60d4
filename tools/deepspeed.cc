// `deepspeed`: DeepSpeed's launcher command. All the work is in the launcher subsystem; the
// autotuner
// (--autotuning) is plugged in here so the launcher library does not depend on it.
#include "autotuning/autotuner.h"
#include "launcher/launcher.h"

int main(int argc, char** argv) {
  return deepspeed::launcher::main(argc, argv, &deepspeed::autotuning::run_autotuner);
}
