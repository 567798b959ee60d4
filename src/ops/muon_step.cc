// Muon's phases (deepspeed/ops/muon.h) in ATen ops.
#include "deepspeed/ops/muon.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "deepspeed/error.h"

namespace deepspeed::ops {
namespace {

// The quintic's coefficients, chosen (Jordan et al.) for the steepest slope at zero rather than convergence to 1:
// singular values land in roughly [0.7, 1.2], which trains as well as an exact orthogonalization.
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;
// Round at which the Gram form multiplies its accumulated polynomial back into X and starts over: the product of
// the rounds' polynomials loses precision as it grows.
constexpr int64_t kGramRestart = 2;

at::Tensor standard_rounds(at::Tensor x, int64_t steps) {
  for (int64_t i = 0; i < steps; ++i) {
    const at::Tensor a = x.mm(x.t());
    const at::Tensor poly = kB * a + kC * a.mm(a);
    x = kA * x + poly.mm(x);
  }
  return x;
}

// Round k maps X to (a*I + Z_k)*X with Z_k = b*R_k + c*R_k^2, a polynomial in R_k = X_k*X_k^T, so X_k = Q_k*X_0
// with Q accumulated in the small square space, and R_{k+1} = (a*I + Z_k)*R_k*(a*I + Z_k) (Z_k commutes with R_k).
at::Tensor gram_rounds(at::Tensor x, int64_t steps) {
  if (steps == 0) return x;
  at::Tensor r = x.mm(x.t());
  at::Tensor q;
  for (int64_t i = 0; i < steps; ++i) {
    if (i == kGramRestart) {
      x = q.mm(x);
      r = x.mm(x.t());
      q = at::Tensor();
    }
    const at::Tensor z = kB * r + kC * r.mm(r);
    if (!q.defined()) {
      q = z.clone();
      q.diagonal().add_(kA);
    } else {
      q = kA * q + z.mm(q);
    }
    if (i + 1 < steps && i + 1 != kGramRestart) {
      const at::Tensor rz = kA * r + z.mm(r);
      r = kA * rz + z.mm(rz);
    }
  }
  return q.mm(x);
}

}  // namespace

NewtonSchulz newton_schulz_from_name(const std::string& name) {
  if (name == "standard") return NewtonSchulz::kStandard;
  if (name == "gram") return NewtonSchulz::kGram;
  throw Error("ns_method must be \"gram\" or \"standard\", got \"" + name + "\"");
}

at::Tensor muon_momentum(const at::Tensor& grad, at::Tensor momentum, double beta) {
  DS_CHECK(beta >= 0 && beta < 1, "muon_momentum: momentum must be in [0, 1), got ", beta);
  DS_CHECK(grad.numel() == momentum.numel() && grad.scalar_type() == at::kFloat &&
               momentum.scalar_type() == at::kFloat && grad.device() == momentum.device(),
           "muon_momentum: grad and momentum must be float32 tensors of one size on one device, got ", grad.numel(),
           " and ", momentum.numel(), " elements");
  const at::Tensor g = grad.detach().reshape(momentum.sizes());
  at::Tensor m = momentum.detach();
  m.lerp_(g, 1.0 - beta);
  return g.lerp(m, beta);
}

at::Tensor muon_orthogonalize(const at::Tensor& update, int64_t steps, NewtonSchulz method) {
  DS_CHECK(update.dim() >= 2, "muon_orthogonalize: Muon updates matrices, got a tensor of shape ", update.sizes());
  DS_CHECK(steps >= 0, "muon_orthogonalize: ns_steps must be >= 0, got ", steps);
  const at::Tensor matrix = update.detach().reshape({update.size(0), -1}).to(at::kFloat);
  const int64_t rows = matrix.size(0), cols = matrix.size(1);
  const bool tall = rows > cols;
  at::Tensor x = tall ? matrix.t() : matrix;
  x = x / (x.norm() + 1e-7);
  // The Gram form saves work only when X is wider than tall; on a square one it is the same cost and more rounding.
  x = method == NewtonSchulz::kGram && x.size(0) < x.size(1) ? gram_rounds(x, steps) : standard_rounds(x, steps);
  if (tall) x = x.t().mul(std::sqrt(static_cast<double>(rows) / static_cast<double>(cols)));
  return x.contiguous().reshape(update.sizes());
}

}  // namespace deepspeed::ops
