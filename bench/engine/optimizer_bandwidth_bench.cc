// How close the fused CPU Adam kernel comes to this machine's memory bandwidth, beside
// torch::optim::Adam, in one process (single rank):
//
//   build/bin/bench_optimizer_bandwidth [--numel 50000000 --reps 5]
//
// On one fp32 tensor of --numel elements it times torch::optim::Adam::step(), ds ops::adam_step
// (auto SIMD level, then every level this CPU supports), and a STREAM-style triad a[i] = b[i] + s *
// c[i] over three arrays of the same length, run on the same threads. Adam reads p, g, m, v and
// writes p, m, v: 7 x 4 = 28 bytes per parameter, so triad GB/s / 28 bytes is the parameters/s a
// bandwidth-bound Adam could reach. (Triad counts 12 bytes per element as STREAM does; its store
// also costs a write-allocate read that Adam's in-place stores do not, so the bound is a slightly
// conservative one.) Everything runs twice: with the threads an engine rank alone on this host
// would get (accelerator::host_threads_per_rank(1), or OMP_NUM_THREADS when set) and with 1 thread.
// Each number is the best and the median of --reps timed repetitions after one warm-up.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/optim/adam.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/ops.h"

namespace {

namespace ops = deepspeed::ops;
using Clock = std::chrono::steady_clock;

constexpr double kAdamBytesPerParam = 28.0;  // read p, g, m, v; write p, m, v (fp32)
constexpr double kTriadBytesPerElem = 12.0;  // read b, c; write a (fp32), as STREAM counts it

struct Timing {
  double best = 0.0;
  double median = 0.0;
};

// One untimed warm-up call, then `reps` timed calls.
Timing time_reps(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  size_t n = t.size();
  return {t.front(), n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])};
}

// a[i] = b[i] + s * c[i] on `threads` OpenMP threads, static chunks, as STREAM's triad.
void triad(float* a, const float* b, const float* c, float s, int64_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// First touch on the same threads and chunks as the timed loop, so pages sit where they are used.
void fill(float* a, float value, int64_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = value;
}

void print_kernel(const char* name, const Timing& t, int64_t n, double torch_best_rate,
                  double bound_rate) {
  double best_rate = n / t.best, median_rate = n / t.median;
  std::printf("  %-26s %9.4f %9.4f %12.3e %12.3e %9.2f %9.2f\n", name, t.best, t.median, best_rate,
              median_rate, torch_best_rate > 0 ? best_rate / torch_best_rate : 1.0,
              best_rate / bound_rate);
}

void run_with_threads(int threads, int64_t n, int reps) {
  at::set_num_threads(threads);
  std::printf(
      "\nthreads=%d (at::get_num_threads()=%d), %lld fp32 elements, best/median of %d reps\n",
      threads, at::get_num_threads(), static_cast<long long>(n), reps);

  // Triad first: its bandwidth is the yardstick for the rest.
  Timing tri;
  {
    // at::empty leaves the pages untouched (64-byte aligned), so fill() is their first touch.
    at::Tensor ta = at::empty({n}), tb = at::empty({n}), tc = at::empty({n});
    float *a = ta.data_ptr<float>(), *b = tb.data_ptr<float>(), *c = tc.data_ptr<float>();
    fill(a, 0.0f, n, threads);
    fill(b, 1.0f, n, threads);
    fill(c, 2.0f, n, threads);
    tri = time_reps(reps, [&] { triad(a, b, c, 3.0f, n, threads); });
    // Read a result so the loop cannot be dropped, and check it did what it says.
    if (a[n / 2] != 7.0f) std::printf("  warning: triad produced a wrong value\n");
  }
  const double triad_best_gbs = kTriadBytesPerElem * n / tri.best * 1e-9;
  const double triad_median_gbs = kTriadBytesPerElem * n / tri.median * 1e-9;
  const double bound_rate = triad_best_gbs * 1e9 / kAdamBytesPerParam;
  std::printf(
      "  triad a=b+s*c: best %.2f GB/s, median %.2f GB/s -> bandwidth-bound Adam at 28 B/param: "
      "%.3e params/s (best triad)\n",
      triad_best_gbs, triad_median_gbs, bound_rate);
  // What the memory system really moved: each store to a[] first reads its line (write-allocate);
  // Adam's stores go to lines it has just read, so they cost no such extra read.
  const double triad_real_gbs = triad_best_gbs * 16.0 / kTriadBytesPerElem;
  std::printf(
      "  (with triad's write-allocate read counted, 16 B/element: %.2f GB/s -> %.3e params/s)\n",
      triad_real_gbs, triad_real_gbs * 1e9 / kAdamBytesPerParam);

  std::printf("  %-26s %9s %9s %12s %12s %9s %9s\n", "Adam step", "best s", "median s",
              "best par/s", "median par/s", "x torch", "x bound");
  double torch_rate = 0.0;
  {
    at::manual_seed(1);
    at::Tensor p = at::randn({n}).set_requires_grad(true);
    p.mutable_grad() = at::randn({n});
    torch::optim::Adam opt({p}, torch::optim::AdamOptions(1e-3));
    Timing t = time_reps(reps, [&] { opt.step(); });  // the warm-up step creates the state
    torch_rate = n / t.best;
    print_kernel("torch::optim::Adam", t, n, 0.0, bound_rate);
  }
  {
    at::manual_seed(1);
    at::Tensor p = at::randn({n}), g = at::randn({n}), m = at::zeros({n}), v = at::zeros({n});
    const ops::AdamParams hp;  // AdamW mode with weight_decay 0: the same update as torch's Adam
    std::vector<ops::SimdLevel> levels{ops::SimdLevel::kAuto};
    for (auto level : ops::supported_simd_levels()) levels.push_back(level);
    for (auto level : levels) {
      int64_t step = 1;
      ops::adam_step(p, g, m, v, hp, step,
                     level);  // step 1 starts the state: time steady-state steps only
      Timing t = time_reps(reps, [&] { ops::adam_step(p, g, m, v, hp, ++step, level); });
      std::string name = std::string("ds adam_step ") + ops::simd_level_name(level);
      if (level == ops::SimdLevel::kAuto)
        name += std::string("=") + ops::simd_level_name(ops::resolve_simd_level());
      print_kernel(name.c_str(), t, n, torch_rate, bound_rate);
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 50000000;
  int reps = 5;
  CLI::App app{"Fused CPU Adam vs torch::optim::Adam vs the memory-bandwidth bound"};
  app.add_option("--numel", n, "elements per tensor")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions per measurement")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    // The threads an engine rank alone on this host gets (the engine's own rule), unless
    // OMP_NUM_THREADS says.
    int full = std::getenv("OMP_NUM_THREADS") != nullptr
                   ? at::get_num_threads()
                   : deepspeed::accelerator::host_threads_per_rank(1);
    std::printf(
        "bench_optimizer_bandwidth: SIMD auto resolves to %s; columns: seconds per step, "
        "parameters/s, "
        "x torch = fused/torch::optim::Adam, x bound = fused/(triad bandwidth / 28 B)\n",
        ops::simd_level_name(ops::resolve_simd_level()));
    run_with_threads(full, n, reps);
    if (full != 1) run_with_threads(1, n, reps);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optimizer_bandwidth: %s\n", e.what());
    return 1;
  }
}
