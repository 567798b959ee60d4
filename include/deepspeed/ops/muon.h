// Muon ("MomentUm Orthogonalized by Newton-Schulz", Jordan et al. 2024) for one 2-D weight, as DeepSpeed's
// MuonWithAuxAdam computes it, in two phases so that a matrix whose elements ZeRO spreads over ranks can be put back
// together in between (runtime/muon_optimizer.h does that):
//   muon_momentum:      m = beta*m + (1-beta)*g, elementwise on any piece of the matrix; returns the Nesterov update
//                       u = (1-beta)*g + beta*m (a new tensor; g is not modified);
//   muon_orthogonalize: on the whole u: X = u / (||u||_F + 1e-7), oriented wide (rows <= cols), then `steps` rounds
//                       of the quintic X <- a*X + (b*A + c*A^2)*X with A = X*X^T and (a, b, c) = (3.4445, -4.7750,
//                       2.0315), back to u's orientation, times sqrt(rows / cols) when rows > cols. Tensors of more
//                       than 2 dims are taken as (size(0), rest) matrices.
// kGram evaluates the same polynomial on the small Gram matrix R = X*X^T (restarted from X at round 2), fewer flops
// for a wide matrix; the two agree to rounding. Both run in fp32 (DeepSpeed runs gram in fp16 and standard in bf16 on
// accelerators that have them, for speed; fp32 is the accurate reading of the same arithmetic). ATen ops: any device.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace deepspeed::ops {

enum class NewtonSchulz { kStandard, kGram };

// "standard" or "gram" (DeepSpeed's ns_method); throws deepspeed::Error naming the value otherwise.
NewtonSchulz newton_schulz_from_name(const std::string& name);

at::Tensor muon_momentum(const at::Tensor& grad, at::Tensor momentum, double beta);
at::Tensor muon_orthogonalize(const at::Tensor& update, int64_t steps, NewtonSchulz method);

}  // namespace deepspeed::ops
