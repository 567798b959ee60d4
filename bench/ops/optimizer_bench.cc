// Optimizer step throughput in params/s (items_per_second): torch::optim::Adam / SGD against ds
// adam_step / sgd_step for every SIMD variant this CPU has, for 1M and 16M fp32 params, in one
// process so the ratios can be read off directly. Both sides use at::get_num_threads() threads (set
// it with OMP_NUM_THREADS).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <string>

#include "deepspeed/ops/cpu_optimizer.h"
#include "deepspeed/ops/simd.h"

namespace {

using deepspeed::ops::SimdLevel;

constexpr int64_t kSizes[] = {int64_t{1} << 20, int64_t{16} << 20};

void set_common(benchmark::State& state, int64_t n, const std::string& label) {
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(label + " threads=" + std::to_string(at::get_num_threads()));
}

void BM_TorchAdam(benchmark::State& state) {
  const int64_t n = state.range(0);
  torch::Tensor p = torch::randn({n}).requires_grad_(true);
  p.mutable_grad() = torch::randn({n});
  torch::optim::Adam opt({p}, torch::optim::AdamOptions(1e-3));
  opt.step();  // creates the state: time steady-state steps only, as for ours
  for (auto _ : state) {
    opt.step();
    benchmark::ClobberMemory();
  }
  set_common(state, n, "torch::optim::Adam");
}

void BM_DsAdam(benchmark::State& state) {
  const auto level = static_cast<SimdLevel>(state.range(0));
  const int64_t n = state.range(1);
  if (!deepspeed::ops::simd_level_supported(level)) {
    state.SkipWithError("SIMD level not supported on this CPU");
    return;
  }
  at::Tensor p = at::randn({n}), g = at::randn({n}), m = at::zeros({n}), v = at::zeros({n});
  const deepspeed::ops::AdamParams hp;
  int64_t step = 1;
  deepspeed::ops::adam_step(p, g, m, v, hp, step, level);  // step 1 takes another path: skip it
  for (auto _ : state) {
    deepspeed::ops::adam_step(p, g, m, v, hp, ++step, level);
    benchmark::ClobberMemory();
  }
  set_common(state, n, std::string("ds adam_step ") + deepspeed::ops::simd_level_name(level));
}

void BM_TorchSgd(benchmark::State& state) {
  const int64_t n = state.range(0);
  torch::Tensor p = torch::randn({n}).requires_grad_(true);
  p.mutable_grad() = torch::randn({n});
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(1e-3).momentum(0.9));
  opt.step();  // creates the momentum buffer
  for (auto _ : state) {
    opt.step();
    benchmark::ClobberMemory();
  }
  set_common(state, n, "torch::optim::SGD momentum=0.9");
}

void BM_DsSgd(benchmark::State& state) {
  const auto level = static_cast<SimdLevel>(state.range(0));
  const int64_t n = state.range(1);
  if (!deepspeed::ops::simd_level_supported(level)) {
    state.SkipWithError("SIMD level not supported on this CPU");
    return;
  }
  at::Tensor p = at::randn({n}), g = at::randn({n}), buf = at::zeros({n});
  deepspeed::ops::SgdParams hp;
  hp.momentum = 0.9;
  int64_t step = 1;
  deepspeed::ops::sgd_step(p, g, buf, hp, step, level);
  for (auto _ : state) {
    deepspeed::ops::sgd_step(p, g, buf, hp, ++step, level);
    benchmark::ClobberMemory();
  }
  set_common(state, n,
             std::string("ds sgd_step momentum=0.9 ") + deepspeed::ops::simd_level_name(level));
}

// Short minimum times keep the whole run under a minute; steps over 4-64 MiB tensors are stable
// enough.
void torch_args(benchmark::internal::Benchmark* b) {
  for (int64_t n : kSizes) b->Arg(n);
  b->MinTime(0.3)->Unit(benchmark::kMillisecond)->UseRealTime();
}

void ds_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"simd", "n"});
  for (int64_t n : kSizes) {
    for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
      b->Args({static_cast<int64_t>(level), n});
    }
  }
  b->MinTime(0.3)->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_TorchAdam)->Apply(torch_args);
BENCHMARK(BM_DsAdam)->Apply(ds_args);
BENCHMARK(BM_TorchSgd)->Apply(torch_args);
BENCHMARK(BM_DsSgd)->Apply(ds_args);

}  // namespace

BENCHMARK_MAIN();
