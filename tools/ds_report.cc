// ds_report: prints the environment deepspeed-cpp runs in (paste it into bug reports).
#include <deepspeed/env_report.h>

#include <iostream>

int main() {
  std::cout << deepspeed::format_environment_report();
  return 0;
}
