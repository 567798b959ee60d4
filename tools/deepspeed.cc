// `deepspeed`: DeepSpeed's launcher command. All the work is in the launcher subsystem.
#include "deepspeed/launcher.h"

int main(int argc, char** argv) { return deepspeed::launcher::main(argc, argv); }
