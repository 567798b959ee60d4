// Per-operator costs for the flops profiler: which ATen operators it counts and the floating-point
// operations and multiply-accumulates (MACs) of one call, from the call's boxed inputs. The
// formulas are DeepSpeed's (deepspeed/profiling/flops_profiler/profiler.py), restated for the ATen
// operators LibTorch runs; a flop is two per MAC for products, one per element for element-wise
// work.
//
// Thread-safety: pure functions over a table built once.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string_view>

namespace deepspeed::profiling::detail {

struct OpCost {
  int64_t flops = 0;
  int64_t macs = 0;
};

// True when the profiler has a formula for operator `name` (e.g. "aten::addmm"); then `*cost` is
// one call's cost with these inputs. Operators counted at zero (embedding, dropout, cross-entropy)
// return true: they are known, so the operators they run inside are not counted either.
bool op_cost(std::string_view name, c10::ArrayRef<const c10::IValue> inputs, OpCost* cost);

}  // namespace deepspeed::profiling::detail
