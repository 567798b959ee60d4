// Uses the installed public API the way a user's program would; prints what it found.
#include <deepspeed/accelerator.h>
#include <deepspeed/error.h>

#include <iostream>

int main() {
  auto& acc = deepspeed::accelerator::get_accelerator();
  try {
    acc.device(99);
    std::cerr << "expected an error for device 99\n";
    return 1;
  } catch (const deepspeed::Error& e) {
    std::cout << "error ok: " << e.what() << "\n";
  }
  std::cout << "accelerator=" << acc.name() << " backend=" << acc.communication_backend_name() << "\n";
  return 0;
}
