// Two tables, rank 0 prints both:
// 1. All-reduce bandwidth of deepspeed::comm against a raw c10d ProcessGroupGloo in the same
//    processes, so the ratio ours/raw is the cost of the facade (sequence numbers, Work wrapping,
//    logger hooks). The raw group uses MASTER_PORT + 1 for its store.
// 2. ZeRO's partitioned collectives in both forms: the flat all-gather (one all_gather_into_tensor
//    call) against one broadcast per owner into its slice, and the flat reduce-scatter (one
//    reduce_scatter_tensor call) against one reduce per owner of its slice. On NCCL the N-call form
//    is N serial launches; this measures what it costs on Gloo. Sizes are the whole (gathered)
//    buffer. The API calls run in the form the comm layer chose (printed in the heading): the flat
//    native call, or with DS_COMM_PARTITIONED_FORM=per_owner one broadcast / reduce per owner.
// Run: bin/deepspeed --num_procs 2 bin/bench_comm_bandwidth [--max_mib 256] [--iters 5]
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
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

  if (rank == 0) {
    std::printf("\nZeRO partitioned collectives, fp32, %d ranks, best of %d (%s)\n", n, iters,
                dc::backend_capabilities().describe().c_str());
    std::printf("%10s | %13s %13s %9s | %13s %13s %9s\n", "size", "all-gather", "N broadcasts", "flat/N",
                "reduce-scat.", "N reduces", "flat/N");
  }
  for (int64_t mib = 1; mib <= max_mib; mib *= 4) {
    const int64_t part = (mib << 20) / 4 / n;  // elements per rank
    at::Tensor full = at::ones({part * n}, at::kFloat);
    at::Tensor mine = at::ones({part}, at::kFloat);
    const auto barrier = [&] { world.barrier(); };
    const double gather_flat = best_of(iters, barrier, [&] { world.all_gather_into_tensor(full, mine); });
    const double gather_n = best_of(iters, barrier, [&] {
      std::vector<dc::Work> works;
      for (int r = 0; r < n; ++r) works.push_back(world.broadcast(full.narrow(0, r * part, part), r, true));
      for (auto& w : works) w.wait();
    });
    const double scatter_flat = best_of(iters, barrier, [&] { world.reduce_scatter_tensor(mine, full); });
    const double scatter_n = best_of(iters, barrier, [&] {
      std::vector<dc::Work> works;
      for (int r = 0; r < n; ++r)
        works.push_back(world.reduce(full.narrow(0, r * part, part), r, dc::ReduceOp::kSum, true));
      for (auto& w : works) w.wait();
    });
    if (rank == 0) {
      std::printf("%7lld MiB | %10.2f ms %10.2f ms %9.3f | %10.2f ms %10.2f ms %9.3f\n",
                  static_cast<long long>(mib), gather_flat * 1e3, gather_n * 1e3, gather_flat / gather_n,
                  scatter_flat * 1e3, scatter_n * 1e3, scatter_flat / scatter_n);
    }
  }
  dc::barrier();
  dc::destroy_process_group();
  return 0;
}
