// Batch-size arithmetic with DeepSpeed's solving rules (runtime/config.py,
// _set_batch_related_parameters and _batch_assertion), but where DeepSpeed floors a division and
// then fails the equality check, we say which division did not come out even.
#include "deepspeed/config/batch_config.h"

#include <string>

#include "deepspeed/error.h"

namespace deepspeed::config {

namespace {

const char kTrain[] = "train_batch_size";
const char kMicro[] = "train_micro_batch_size_per_gpu";
const char kGas[] = "gradient_accumulation_steps";

void check_given(const char* key, const std::optional<int64_t>& value) {
  if (value && *value < 1) {
    throw ConfigError(std::string(key) + ": expected an integer >= 1, got " +
                      std::to_string(*value));
  }
}

// a * b, or a ConfigError naming both factors when the product does not fit in 64 bits (a batch of
// 2^63 would wrap to a negative size and pass every later check).
int64_t times(int64_t a, const std::string& a_text, int64_t b, const std::string& b_text) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw ConfigError(a_text + " * " + b_text + " overflows a 64-bit integer: give batch sizes a machine can run");
  }
  return out;
}

std::string named(const char* key, int64_t value) { return std::string(key) + " " + std::to_string(value); }

// micro * gas * world, checked, each factor named in the error.
int64_t batch_product(int64_t micro, int64_t gas, int ws, const std::string& world) {
  return times(times(micro, named(kMicro, micro), gas, named(kGas, gas)),
               named(kMicro, micro) + " * " + named(kGas, gas), ws, world);
}

// `train` must split evenly into `parts`; otherwise the message shows the arithmetic.
int64_t divide(int64_t train, int64_t parts, const char* solved, const std::string& parts_text) {
  if (train % parts != 0 || train / parts < 1) {
    throw ConfigError(std::string(solved) + ": cannot be solved: " + kTrain + " " +
                      std::to_string(train) + " is not a positive multiple of " + parts_text +
                      " = " + std::to_string(parts));
  }
  return train / parts;
}

}  // namespace

BatchSizes resolve_batch_sizes(std::optional<int64_t> train, std::optional<int64_t> micro,
                               std::optional<int64_t> gas, int ws) {
  if (ws < 1) {
    throw ConfigError("data-parallel world size: expected an integer >= 1, got " +
                      std::to_string(ws));
  }
  check_given(kTrain, train);
  check_given(kMicro, micro);
  check_given(kGas, gas);
  const std::string world = "world size " + std::to_string(ws);

  BatchSizes b;
  if (train && micro && gas) {
    b = {*train, *micro, *gas};
  } else if (train && micro) {
    const std::string parts = named(kMicro, *micro) + " * " + world;
    b = {*train, *micro, divide(*train, times(*micro, named(kMicro, *micro), ws, world), kGas, parts)};
  } else if (train && gas) {
    const std::string parts = named(kGas, *gas) + " * " + world;
    b = {*train, divide(*train, times(*gas, named(kGas, *gas), ws, world), kMicro, parts), *gas};
  } else if (micro && gas) {
    b = {batch_product(*micro, *gas, ws, world), *micro, *gas};
  } else if (train) {
    b = {*train, divide(*train, ws, kMicro, world), 1};
  } else if (micro) {
    b = {times(*micro, named(kMicro, *micro), ws, world), *micro, 1};
  } else {
    throw ConfigError(std::string(kTrain) + ": either " + kTrain + " or " + kMicro +
                      " must be given (" + kGas + " alone cannot fix the batch size)");
  }

  const int64_t product =
      batch_product(b.train_micro_batch_size_per_gpu, b.gradient_accumulation_steps, ws, world);
  if (b.train_batch_size != product) {
    throw ConfigError(std::string(kTrain) + " " + std::to_string(b.train_batch_size) +
                      " != " + kMicro + " " + std::to_string(b.train_micro_batch_size_per_gpu) +
                      " * " + kGas + " " + std::to_string(b.gradient_accumulation_steps) + " * " +
                      world + " = " + std::to_string(product));
  }
  return b;
}

}  // namespace deepspeed::config
