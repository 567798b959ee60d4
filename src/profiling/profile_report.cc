#include "profiling/profile_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace deepspeed::profiling {
namespace {

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

double round2(double x) { return std::round(x * 100.0) / 100.0; }

// DeepSpeed's `{:<70}  {:<8}`.
std::string summary_line(const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-70s  %-8s\n", label.c_str(), value.c_str());
  return buf;
}

std::string percent(double part, double total) {
  return format("%g", total > 0 ? round2(100.0 * part / total) : 0.0);
}

}  // namespace

std::string number_to_string(double num) {
  double magnitude = 1;
  const char* units = "";
  if (num >= 1e12) {
    magnitude = 1e12, units = "T";
  } else if (num >= 1e9) {
    magnitude = 1e9, units = "G";
  } else if (num >= 1e6) {
    magnitude = 1e6, units = "M";
  } else if (num >= 1e3) {
    magnitude = 1e3, units = "K";
  } else if (num >= 1 || num == 0) {
    magnitude = 1, units = "";
  } else if (num >= 1e-3) {
    magnitude = 1e-3, units = "m";
  } else {
    magnitude = 1e-6, units = "u";
  }
  return format("%g ", round2(num / magnitude)) + units;
}

std::string macs_to_string(double macs) { return number_to_string(macs) + "MACs"; }
std::string flops_to_string(double flops) { return number_to_string(flops) + "FLOPS"; }
std::string duration_to_string(double seconds) { return number_to_string(seconds) + "s"; }

std::string params_to_string(double params) {
  std::string s = number_to_string(params);
  std::replace(s.begin(), s.end(), 'G', 'B');  // billions of parameters
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

namespace detail {
namespace {

struct Totals {
  int64_t params = 0;
  int64_t flops = 0;
  int64_t macs = 0;
  double seconds = 0;
};

std::string summary(const PrintOptions& o, double recompute_fwd_factor, const Totals& t) {
  std::string out;
  out += "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n";
  out += "Profile Summary at step " + std::to_string(o.profile_step) + ":\n";
  out +=
      "Notations:\n"
      "data parallel size (dp_size), model parallel size(mp_size),\n"
      "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
      "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
      "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
      "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n";
  const TrainingInfo* train = o.training ? &*o.training : nullptr;
  const int mp = train ? train->mp_world_size : 1;
  if (train) {
    out += summary_line("world size: ", std::to_string(train->world_size));
    out += summary_line("data parallel size: ", std::to_string(train->dp_world_size));
    out += summary_line("model parallel size: ", std::to_string(train->mp_world_size));
    out += summary_line("batch size per GPU: ", std::to_string(train->micro_batch_size));
  }
  const double flops = static_cast<double>(t.flops);
  out += summary_line("params per GPU: ", params_to_string(static_cast<double>(t.params)));
  out += summary_line("params of model = params per GPU * mp_size: ",
                      params_to_string(static_cast<double>(t.params) * mp));
  out += summary_line("fwd MACs per GPU: ", macs_to_string(static_cast<double>(t.macs)));
  out += summary_line("fwd flops per GPU: ", number_to_string(flops));
  out += summary_line("fwd flops of model = fwd flops per GPU * mp_size: ",
                      number_to_string(flops * mp));
  const double fwd = train ? train->fwd_latency : t.seconds;
  auto rate = [](double work, double seconds) {
    return flops_to_string(seconds > 0 ? work / seconds : 0.0);
  };
  out += summary_line("fwd latency: ", duration_to_string(fwd));
  out += summary_line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", rate(flops, fwd));
  if (train) {
    // Backward computes two products per forward product (input and weight gradients), plus what is
    // recomputed.
    const double bwd_factor = 2.0 + recompute_fwd_factor;
    const std::string b = format("%g", bwd_factor), b1 = format("%g", bwd_factor + 1);
    const double bwd = train->bwd_latency, step = train->step_latency;
    out += summary_line("bwd latency: ", duration_to_string(bwd));
    out += summary_line("bwd FLOPS per GPU = " + b + " * fwd flops per GPU / bwd latency: ",
                        rate(bwd_factor * flops, bwd));
    out +=
        summary_line("fwd+bwd FLOPS per GPU = " + b1 + " * fwd flops per GPU / (fwd+bwd latency): ",
                     rate((bwd_factor + 1) * flops, fwd + bwd));
    out += summary_line("step latency: ", duration_to_string(step));
    const double iter = fwd + bwd + step;
    out += summary_line("iter latency: ", duration_to_string(iter));
    out += summary_line("FLOPS per GPU = " + b1 + " * fwd flops per GPU / iter latency: ",
                        rate((bwd_factor + 1) * flops, iter));
    const double samples = iter > 0 ? static_cast<double>(train->samples_per_iter) / iter : 0.0;
    out += summary_line("samples/second: ", format("%.2f", samples));
  }
  return out;
}

// Per depth, per module type: summed MACs, params and latency; the top `top_modules` types by each.
std::string aggregated(const ModuleTree& tree, const PrintOptions& o) {
  struct Sums {
    std::string type;
    int64_t macs = 0;
    int64_t params = 0;
    double seconds = 0;
  };
  std::vector<std::vector<Sums>>
      levels;  // [depth] in order of first appearance, as DeepSpeed's dicts
  const auto& nodes = tree.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ModuleNode& n = nodes[i];
    if (static_cast<size_t>(n.depth) >= levels.size())
      levels.resize(static_cast<size_t>(n.depth) + 1);
    auto& level = levels[static_cast<size_t>(n.depth)];
    auto it =
        std::find_if(level.begin(), level.end(), [&](const Sums& s) { return s.type == n.type; });
    if (it == level.end()) it = level.insert(level.end(), Sums{n.type});
    it->macs += tree.subtree_macs(static_cast<int>(i));
    it->params += n.params;
    it->seconds += tree.subtree_seconds(static_cast<int>(i));
  }
  size_t depth = levels.size();
  if (o.module_depth >= 0) depth = std::min(depth, static_cast<size_t>(o.module_depth));
  std::string out = "Top " + std::to_string(o.top_modules) +
                    " modules in terms of params, MACs or fwd latency at different model depths:\n";
  auto top = [&](std::vector<Sums> level, auto key, auto to_string) {
    std::stable_sort(level.begin(), level.end(),
                     [&](const Sums& a, const Sums& b) { return key(a) > key(b); });
    std::string s = "{";
    const size_t n = std::min(level.size(), static_cast<size_t>(std::max(o.top_modules, 0)));
    for (size_t i = 0; i < n; ++i)
      s += (i ? ", '" : "'") + level[i].type + "': '" +
           to_string(static_cast<double>(key(level[i]))) + "'";
    return s + "}";
  };
  for (size_t d = 0; d < depth; ++d) {
    out += "depth " + std::to_string(d) + ":\n";
    out += "    params      - " +
           top(
               levels[d], [](const Sums& s) { return s.params; }, params_to_string) +
           "\n";
    out += "    MACs        - " +
           top(
               levels[d], [](const Sums& s) { return s.macs; }, macs_to_string) +
           "\n";
    out += "    fwd latency - " +
           top(
               levels[d], [](const Sums& s) { return s.seconds; }, duration_to_string) +
           "\n";
  }
  return out;
}

// One module as PyTorch prints it, with the profile first in its description:
//   Name(<profile>, <own args>)            a module without children
//   Name(\n  <profile>\n  (key): child\n)  a module with children
std::string module_repr(const ModuleTree& tree, int index, const Totals& t,
                        const std::string& indent) {
  const ModuleNode& n = tree.nodes()[static_cast<size_t>(index)];
  const double params = static_cast<double>(n.params);
  const double macs = static_cast<double>(tree.subtree_macs(index));
  const double flops = static_cast<double>(tree.subtree_flops(index));
  const double seconds = tree.subtree_seconds(index);
  std::string profile =
      params_to_string(params) + " = " + percent(params, static_cast<double>(t.params)) +
      "% Params, " + macs_to_string(macs) + " = " + percent(macs, static_cast<double>(t.macs)) +
      "% MACs, " + duration_to_string(seconds) + " = " + percent(seconds, t.seconds) +
      "% latency, " + flops_to_string(seconds > 0 ? round2(flops / seconds) : 0.0);
  if (!n.args.empty()) profile += ", " + n.args;
  if (n.children.empty()) return n.type + "(" + profile + ")";
  const std::string inner = indent + "  ";
  std::string out = n.type + "(\n" + inner + profile + "\n";
  for (int child : n.children)
    out += inner + "(" + tree.nodes()[static_cast<size_t>(child)].key +
           "): " + module_repr(tree, child, t, inner) + "\n";
  return out + indent + ")";
}

}  // namespace

std::string format_report(const ModuleTree& tree, const PrintOptions& options,
                          double recompute_fwd_factor) {
  Totals t;
  t.params = tree.nodes()[0].params;
  t.flops = tree.subtree_flops(0);
  t.macs = tree.subtree_macs(0);
  t.seconds = tree.subtree_seconds(0);
  std::string out = summary(options, recompute_fwd_factor, t);
  out +=
      "\n----------------------------- Aggregated Profile per GPU -----------------------------\n";
  out += aggregated(tree, options);
  if (options.detailed) {
    out +=
        "\n------------------------------ Detailed Profile per GPU "
        "------------------------------\n";
    out +=
        "Each module profile is listed after its name in the following order: \n"
        "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
        "percentage of total fwd "
        "latency, fwd FLOPS\n\n"
        "Note: 1. A module's MACs and latency include its submodules'; operators a module "
        "runs itself (residual adds, attention products) make up the difference between a "
        "parent and the sum of its children.\n"
        "2. Flops are a theoretical estimate from each operator's formula, so FLOPS computed "
        "from them can exceed what the hardware sustains.\n"
        "3. Latencies are the summed wall time of the ATen operators charged to a module, so "
        "the root's is less than the fwd latency above, which the engine measures around the "
        "whole forward.\n\n";
    out += module_repr(tree, 0, t, "") + "\n";
  }
  out += "------------------------------------------------------------------------------\n";
  return out;
}

}  // namespace detail
}  // namespace deepspeed::profiling
