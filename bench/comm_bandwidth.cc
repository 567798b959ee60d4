// All-reduce bandwidth of deepspeed::comm against a raw c10d ProcessGroupGloo in the same
// processes, so the ratio ours/raw is the cost of the facade (sequence numbers, Work wrapping,
// logger hooks). Run: bin/deepspeed --num_procs 2 bin/bench_comm_bandwidth [--max_mib 256] [--iters
// 5] Rank 0 prints size, latency, algbw, busbw (GB/s) for both. The raw group uses MASTER_PORT + 1
// for its store.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "deepspeed/comm.h"

namespace dc = deepspeed::comm;

namespace {

// Best of `iters` timed runs after one warm-up, in seconds; every rank agrees on the start via a
// barrier.
double best_of(int iters, const std::function<void()>& barrier, const std::function<void()>& op) {
  op();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    op();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int int_flag(int argc, char** argv, const char* name, int dflt) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  int max_mib = int_flag(argc, argv, "--max_mib", 256);
  int iters = int_flag(argc, argv, "--iters", 5);
  dc::init_distributed();
  dc::ProcessGroup world = dc::get_world_group();
  int rank = world.rank(), n = world.size();

  const char* port_env = std::getenv("MASTER_PORT");
  const char* addr_env = std::getenv("MASTER_ADDR");
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>((port_env ? std::atoi(port_env) : 29500) + 1);
  so.isServer = rank == 0;
  so.numWorkers = n;
  auto store = c10::make_intrusive<c10d::TCPStore>(addr_env ? addr_env : "127.0.0.1", so);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::minutes(5));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto raw = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, n, opts);

  if (rank == 0) {
    std::printf("all_reduce fp32, %d ranks, best of %d\n", n, iters);
    std::printf("%10s | %12s %10s %10s | %12s %10s %10s | %9s\n", "size", "ours (ms)", "algbw",
                "busbw", "raw (ms)", "algbw", "busbw", "ours/raw");
  }
  double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  for (int64_t mib = 1; mib <= max_mib; mib *= 4) {
    int64_t bytes = mib << 20;
    at::Tensor x = at::ones({bytes / 4}, at::kFloat);
    double ours = best_of(
        iters, [&] { world.barrier(); }, [&] { world.all_reduce(x); });
    std::vector<at::Tensor> v{x};
    double theirs = best_of(
        iters, [&] { raw->barrier()->wait(); }, [&] { raw->allreduce(v)->wait(); });
    if (rank == 0) {
      double a1 = bytes / ours * 1e-9, a2 = bytes / theirs * 1e-9;
      std::printf("%7lld MiB | %12.2f %10.3f %10.3f | %12.2f %10.3f %10.3f | %9.3f\n",
                  static_cast<long long>(mib), ours * 1e3, a1, a1 * factor, theirs * 1e3, a2,
                  a2 * factor, ours / theirs);
    }
  }
  if (rank == 0) std::printf("(algbw/busbw in GB/s; busbw = algbw * 2(n-1)/n)\n");
  dc::barrier();
  dc::destroy_process_group();
  return 0;
}
