#include "autotuning/cost_model.h"

#include <cmath>
#include <utility>

#include "deepspeed/error.h"

namespace deepspeed::autotuning {
namespace {

// Relative to the mean diagonal of XᵀX, so the penalty is negligible against any feature that
// varies and does not depend on the features' scale.
constexpr double kRelativeRidge = 1e-6;

using Matrix = std::array<std::array<double, kCostFeatures>, kCostFeatures>;
using Vector = std::array<double, kCostFeatures>;

// Solves a * x = b by Gaussian elimination with partial pivoting. `a` is symmetric positive
// definite here (XᵀX plus a positive ridge), so pivots are non-zero.
Vector solve(Matrix a, Vector b) {
  const int n = kCostFeatures;
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int row = col + 1; row < n; ++row) {
      if (std::fabs(a[row][col]) > std::fabs(a[pivot][col])) pivot = row;
    }
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    DS_ASSERT(a[col][col] != 0, "singular normal equations");
    for (int row = col + 1; row < n; ++row) {
      const double f = a[row][col] / a[col][col];
      for (int k = col; k < n; ++k) a[row][k] -= f * a[col][k];
      b[row] -= f * b[col];
    }
  }
  Vector x{};
  for (int row = n - 1; row >= 0; --row) {
    double sum = b[row];
    for (int k = row + 1; k < n; ++k) sum -= a[row][k] * x[k];
    x[row] = sum / a[row][row];
  }
  return x;
}

}  // namespace

std::array<double, kCostFeatures> cost_features(const Candidate& c) {
  return {1.0, static_cast<double>(c.zero_stage), std::log2(static_cast<double>(c.micro_batch)),
          c.offload_optimizer != zero::OffloadTarget::kNone ? 1.0 : 0.0,
          c.offload_param != zero::OffloadTarget::kNone ? 1.0 : 0.0};
}

void CostModel::fit(const std::vector<Candidate>& candidates, const std::vector<double>& ys) {
  DS_ASSERT(!candidates.empty() && candidates.size() == ys.size());
  Matrix xtx{};
  Vector xty{};
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Vector x = cost_features(candidates[i]);
    for (int r = 0; r < kCostFeatures; ++r) {
      for (int c = 0; c < kCostFeatures; ++c) xtx[r][c] += x[r] * x[c];
      xty[r] += x[r] * ys[i];
    }
  }
  double trace = 0;
  for (int r = 0; r < kCostFeatures; ++r) trace += xtx[r][r];
  const double ridge = kRelativeRidge * trace / kCostFeatures;
  // Not the intercept (feature 0): shrinking it would bias every prediction.
  for (int r = 1; r < kCostFeatures; ++r) xtx[r][r] += ridge;
  weights_ = solve(xtx, xty);
}

double CostModel::predict(const Candidate& candidate) const {
  const Vector x = cost_features(candidate);
  double y = 0;
  for (int r = 0; r < kCostFeatures; ++r) y += weights_[r] * x[r];
  return y;
}

}  // namespace deepspeed::autotuning
