#include "zero/global_norm.h"

#include <ATen/ATen.h>

#include <cmath>

namespace deepspeed::zero {

double global_norm(const std::vector<at::Tensor>& grads, comm::ProcessGroup* group) {
  double sq = 0.0;
  for (const auto& g : grads) {
    // norm() streams once with no temporary; g.pow(2).sum() would allocate a gradient-sized buffer every step.
    const double n = g.norm().item<double>();
    sq += n * n;
  }
  if (group != nullptr && group->size() > 1) {
    at::Tensor t = at::tensor({sq}, at::kDouble);
    group->all_reduce(t, comm::ReduceOp::kSum);
    sq = t.item<double>();
  }
  return std::sqrt(sq);
}

}  // namespace deepspeed::zero
