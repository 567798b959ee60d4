// Layer partitioning for PipelineModule (include/deepspeed/pipe/module.h): DeepSpeed's
// partition_uniform, partition_balanced and the partition_method strings.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <regex>
#include <sstream>

#include "deepspeed/error.h"
#include "deepspeed/pipe/module.h"

namespace deepspeed::pipe {
namespace {

// Contiguous parts each weighing at most `limit` (greedy from the front); empty when more than
// num_parts are needed.
Partition greedy_parts(const std::vector<double>& prefix, int num_parts, double limit) {
  const int n = static_cast<int>(prefix.size()) - 1;
  Partition parts{0};
  int start = 0;
  for (int p = 0; p < num_parts && start < n; ++p) {
    // The furthest end whose part [start, end) stays within the limit (at least one item).
    int end = static_cast<int>(std::upper_bound(prefix.begin() + start + 1, prefix.end(),
                                                prefix[start] + limit) -
                               prefix.begin()) -
              1;
    end = std::max(end, start + 1);
    // Leave at least one item for each remaining part.
    end = std::min(end, n - (num_parts - 1 - p));
    if (end <= start) return {};
    if (prefix[end] - prefix[start] > limit && end > start + 1) return {};
    parts.push_back(end);
    start = end;
  }
  if (start != n) return {};
  while (static_cast<int>(parts.size()) < num_parts + 1) parts.push_back(n);
  return parts;
}

double heaviest(const std::vector<double>& prefix, const Partition& parts) {
  double worst = 0;
  for (size_t p = 0; p + 1 < parts.size(); ++p)
    worst = std::max(worst, prefix[parts[p + 1]] - prefix[parts[p]]);
  return worst;
}

// Puts the default CPU generator back to its state at construction.
class RestoreCpuGenerator {
 public:
  RestoreCpuGenerator() : generator_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    state_ = generator_.get_state();
  }
  ~RestoreCpuGenerator() {
    std::lock_guard<std::mutex> lock(generator_.mutex());
    generator_.set_state(state_);
  }
  RestoreCpuGenerator(const RestoreCpuGenerator&) = delete;
  RestoreCpuGenerator& operator=(const RestoreCpuGenerator&) = delete;

 private:
  at::Generator generator_;
  at::Tensor state_;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

Partition partition_uniform(int num_items, int num_parts) {
  DS_CHECK(num_parts >= 1, "partition_uniform: num_parts must be >= 1, got ", num_parts);
  DS_CHECK(num_items >= 0, "partition_uniform: num_items must be >= 0, got ", num_items);
  Partition parts(static_cast<size_t>(num_parts) + 1, 0);
  const int chunk = num_items / num_parts, residual = num_items % num_parts;
  for (int p = 0; p < num_parts; ++p) parts[p + 1] = parts[p] + chunk + (p < residual ? 1 : 0);
  return parts;
}

Partition partition_balanced(const std::vector<double>& weights, int num_parts) {
  DS_CHECK(num_parts >= 1, "partition_balanced: num_parts must be >= 1, got ", num_parts);
  const int n = static_cast<int>(weights.size());
  if (n <= num_parts) {
    Partition parts(static_cast<size_t>(num_parts) + 1);
    for (int p = 0; p <= num_parts; ++p) parts[p] = std::min(p, n);
    return parts;
  }
  std::vector<double> prefix(weights.size() + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    DS_CHECK(weights[i] >= 0, "partition_balanced: weight ", i, " is negative (", weights[i], ")");
    prefix[i + 1] = prefix[i] + weights[i];
  }
  // Binary search on the heaviest part: the smallest limit for which the greedy split needs at most
  // num_parts.
  double lo = 0, hi = prefix[n];
  for (double w : weights) lo = std::max(lo, w);
  Partition best = greedy_parts(prefix, num_parts, hi);
  if (best.empty()) best = partition_uniform(n, num_parts);
  for (int iter = 0; iter < 100 && hi - lo > 1e-9 * std::max(1.0, hi); ++iter) {
    const double mid = (lo + hi) / 2;
    Partition parts = greedy_parts(prefix, num_parts, mid);
    if (parts.empty()) {
      lo = mid;
    } else {
      best = parts;
      hi = mid;
    }
  }
  // Exact limits are sums of contiguous weights: the final greedy split at the best found limit.
  Partition exact = greedy_parts(prefix, num_parts, heaviest(prefix, best));
  return exact.empty() ? best : exact;
}

Partition partition_layers(const std::vector<LayerSpec>& layers, int num_stages,
                           const std::string& method) {
  const int n = static_cast<int>(layers.size());
  DS_CHECK(num_stages >= 1, "pipeline: num_stages must be >= 1, got ", num_stages);
  DS_CHECK(n >= num_stages, "pipeline: ", n, " layers cannot fill ", num_stages, " stages");
  const std::string m = lower(method);
  Partition parts;
  if (m == "uniform") {
    parts = partition_uniform(n, num_stages);
  } else if (m == "parameters") {
    std::vector<double> weights(static_cast<size_t>(n), 0.0);
    std::vector<std::string> seen_keys;
    // Counting builds every layer once and so draws from the default generator; restore it so the
    // stage's own layers start from the same state whichever method partitioned them.
    RestoreCpuGenerator restore;
    for (int i = 0; i < n; ++i) {
      const LayerSpec& spec = layers[static_cast<size_t>(i)];
      if (spec.is_function()) continue;
      if (spec.tied_key()) {
        if (std::find(seen_keys.begin(), seen_keys.end(), *spec.tied_key()) != seen_keys.end())
          continue;
        seen_keys.push_back(*spec.tied_key());
      }
      torch::nn::AnyModule built = spec.build();
      double count = 0;
      for (const auto& p : built.ptr()->parameters())
        if (p.requires_grad()) count += static_cast<double>(p.numel());
      weights[static_cast<size_t>(i)] = count;
    }
    parts = partition_balanced(weights, num_stages);
  } else if (m.rfind("type:", 0) == 0) {
    const std::string pattern = method.substr(5);
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::icase);
    } catch (const std::regex_error& e) {
      DS_CHECK(false, "pipeline: partition_method \"", method, "\": bad regex: ", e.what());
    }
    std::vector<double> weights(static_cast<size_t>(n), 0.0);
    int matched = 0;
    for (int i = 0; i < n; ++i)
      if (std::regex_search(layers[static_cast<size_t>(i)].type_name(), re)) {
        weights[static_cast<size_t>(i)] = 1.0;
        ++matched;
      }
    DS_CHECK(matched > 0, "pipeline: partition_method \"", method, "\" matches no layer type");
    parts = partition_balanced(weights, num_stages);
  } else if (!m.empty() && (std::isdigit(static_cast<unsigned char>(m[0])) != 0)) {
    std::stringstream ss(method);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        size_t used = 0;
        parts.push_back(std::stoi(item, &used));
        DS_CHECK(used == item.size(), "");
      } catch (const std::exception&) {
        DS_CHECK(false, "pipeline: partition_method \"", method, "\": '", item,
                 "' is not a layer index");
      }
    }
    DS_CHECK(static_cast<int>(parts.size()) == num_stages + 1, "pipeline: partition_method \"",
             method, "\" gives ", parts.size(), " boundaries; ", num_stages, " stages need ",
             num_stages + 1, " (0, ..., ", n, ")");
    DS_CHECK(parts.front() == 0 && parts.back() == n, "pipeline: partition_method \"", method,
             "\" must start at 0 and end at the layer count ", n);
    for (size_t s = 1; s < parts.size(); ++s)
      DS_CHECK(parts[s - 1] < parts[s], "pipeline: partition_method \"", method,
               "\" is not strictly ascending (", parts[s - 1], " then ", parts[s], ")");
  } else {
    DS_CHECK(false, "pipeline: unknown partition_method \"", method,
             "\" (expected parameters, uniform, type:<regex> or boundaries like 0,3,7)");
  }
  for (int s = 0; s < num_stages; ++s)
    DS_CHECK(parts[s] < parts[s + 1], "pipeline: partition_method \"", method, "\" leaves stage ",
             s, " without layers (boundaries ", parts[s], " and ", parts[s + 1], ")");
  return parts;
}

}  // namespace deepspeed::pipe
